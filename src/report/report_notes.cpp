// The words of a leak report's notes. The detector, `memseal run` and its launcher write a note as
// fields of LeakReport (why graph nodes were not watched, build-ups freed, malloc's free memory, a
// device's verdict, where the report came from); this is the one place those fields become text,
// for the text, JSON and HTML reports and the Python module alike. (explain's notes become text in
// explain_text.cpp: its report needs libtorch's headers, which this file is built without.)
#include <string>
#include <vector>

#include "common/text.h"
#include "memseal/leak_detector.h"

namespace memseal {

namespace {

// How the two notes on build-ups judged no leak begin; people and tests search for them.
constexpr const char* kHeldNotLeakWords = "held for a while, then freed (not a leak)";
constexpr const char* kCollectedNotLeakWords =
    "garbage in reference cycles, freed by Python's garbage collector (not a leak)";

std::string phaseText(const std::string& phase) {
  return phase.empty() ? std::string() : " of phase \"" + phase + "\"";
}

// " at FILE:LINE" of the finding's first frame of the user's code, or "".
std::string userLineText(const LeakFinding& finding) {
  for (const StackFrame& frame : finding.site.frames) {
    if (frame.is_internal || frame.file.empty()) continue;
    return " at " + common::shownPath(frame.file) + ":" + std::to_string(frame.line);
  }
  return "";
}

std::string madeByText(const LeakFinding& finding) {
  return "made by " +
         common::shownOpName(finding.site.outer_op.empty() ? finding.site.op
                                                           : finding.site.outer_op) +
         userLineText(finding);
}

// "once, over N steps" or "N times, every ~M steps".
std::string timesText(const HeldUntilFreed& freed) {
  return freed.times == 1
             ? "once, over " + std::to_string(freed.last_step - freed.first_step + 1) + " steps"
             : std::to_string(freed.times) + " times, every ~" +
                   std::to_string(static_cast<long long>(freed.steps_per_time + 0.5)) + " steps";
}

std::string heldByPhaseLine(const LeakFinding& finding) {
  const HeldUntilFreed& freed = *finding.freed;
  return std::string(kHeldNotLeakWords) + ": tensors without autograd history " +
         madeByText(finding) + " built up across steps (steps " + std::to_string(freed.first_step) +
         "-" + std::to_string(freed.last_step) + phaseText(freed.phase) +
         ") and were freed together " + timesText(freed) + ", at most " +
         common::bytesText(freed.peak_bytes) +
         ": memory a phase gathers on purpose (predictions for a metric, a cache cleared when "
         "full) costs that much at its peak";
}

std::string collectedLine(const LeakFinding& finding) {
  const HeldUntilFreed& freed = *finding.freed;
  std::string what =
      finding.category == LeakCategory::kTensorsRetained
          ? "tensors"
          : "tensors with autograd history (" + std::string(categoryId(finding.category)) + ")";
  return std::string(kCollectedNotLeakWords) + ": " + what + " " + madeByText(finding) +
         " built up across steps (steps " + std::to_string(freed.first_step) + "-" +
         std::to_string(freed.last_step) + phaseText(freed.phase) +
         ") and were freed by the collector " + timesText(freed) + ", at most " +
         common::bytesText(freed.peak_bytes) +
         (freed.building_up ? ", building up again now" : "") +
         ": objects that refer to each other (a tensor kept on its own autograd Function's ctx, "
         "a module that refers back to its owner) wait for the collector; break the cycle (a "
         "weakref.ref for the back reference, or clear the attribute after use), or call "
         "gc.collect() where memory must come back";
}

std::string mallocFreeLine(const MallocFreeMemory& free) {
  auto mib = [](std::int64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; };
  std::string held = "malloc holds " + mib(free.now_bytes) + " of freed memory, up from " +
                     mib(free.after_warmup_bytes) + " after warm-up";
  if (free.kept_graphs_cost) {
    // Without the kept graphs the same loop frees and reuses that memory: it is the leak's.
    return held +
           ": what each step freed, stranded between the autograd graphs kept across steps, "
           "resident but not reusable; part of what that leak costs, counted in its resident "
           "memory per step. It goes with the leak";
  }
  return held +
         ": holes in its heap between allocations of ever-new sizes, resident but not in use (not "
         "a leak; left out of the resident memory judged here). If the process's memory keeps "
         "growing this way: call malloc_trim(0) now and then to return it, set "
         "MALLOC_ARENA_MAX=2 (fewer heaps to fragment when many threads allocate), or preload "
         "jemalloc or tcmalloc";
}

// A device's verdict, where it is no finding of its own ("" where a finding says it).
std::string deviceLine(const DeviceMemorySummary& device) {
  std::string totals = common::bytesText(static_cast<std::int64_t>(device.allocated)) +
                       " allocated, " +
                       common::bytesText(static_cast<std::int64_t>(device.reserved)) +
                       " reserved by PyTorch's caching allocator";
  if (device.verdict == "steady") return device.device + ": steady (" + totals + ")";
  if (device.verdict != "leak") {
    return device.device + ": " + device.verdict + ", not a leak (" + totals + "). " + device.hint;
  }
  std::string growth =
      common::bytesText(static_cast<std::int64_t>(device.growth_per_step)) + "/step";
  if (device.growth_shown_as == "tensors") {
    return device.device + ": memory allocated to tensors grows +" + growth + " (" + totals +
           "); the findings name the tensors kept";
  }
  if (device.growth_shown_as == "work") {
    return device.device + ": memory allocated at step boundaries grows +" + growth + " (" +
           totals +
           "), yet no block outlives the step after the one that made it: each step's work grows "
           "(a batch or a sequence that keeps growing), which is no leak but will run out of "
           "memory; bound the input's size (memseal explain shows what the peak holds)";
  }
  return "";  // "blocks": the allocator's own finding says it
}

void addOriginLines(const ReportOrigin& origin, std::vector<std::string>& lines) {
  if (origin.forked_from_pid != 0) {
    lines.push_back("forked child of pid " + std::to_string(origin.forked_from_pid) +
                    " (not exec'd): its memory beside its tensors is its private memory (pages "
                    "it no longer shares with its parent), shown as resident");
  }
  if (origin.taken_after_step) {
    lines.push_back("memseal run: this report was taken after step " +
                    std::to_string(*origin.taken_after_step) + ", " +
                    std::to_string(origin.ms_before_end) +
                    " ms before the program ended (at its end the program freed what it held)");
  }
  if (origin.newest_steps_kept != 0) {
    lines.push_back("memseal run: this report, taken while the program ran, keeps the newest " +
                    std::to_string(origin.newest_steps_kept) + " steps' samples");
  }
  if (!origin.interim_age.empty()) {
    lines.push_back("memseal run: pid " + std::to_string(origin.pid) +
                    " ended before its final report (a crash, a kill or _exit): this is its latest "
                    "report, taken while it ran, " +
                    origin.interim_age + " before memseal read it");
  }
}

}  // namespace

std::vector<std::string> LeakReport::noteLines() const {
  std::vector<std::string> lines;
  addOriginLines(origin, lines);
  if (!graph_nodes_unwatched.empty()) {
    lines.push_back("autograd graph nodes were not watched (" + graph_nodes_unwatched +
                    "): a graph kept alive without tensor storage (`total_loss += loss`) is not "
                    "seen");
  }
  for (const LeakFinding& build_up : freed_build_ups) {
    if (!build_up.freed) continue;
    lines.push_back(build_up.freed->by_collector ? collectedLine(build_up)
                                                 : heldByPhaseLine(build_up));
  }
  if (malloc_free) lines.push_back(mallocFreeLine(*malloc_free));
  for (const DeviceMemorySummary& device : devices) {
    if (std::string line = deviceLine(device); !line.empty()) lines.push_back(line);
  }
  if (!cuda_oom_file.empty()) {
    lines.push_back("CUDA ran out of memory; what was live then is in " + cuda_oom_file);
  }
  if (phase_changes_capped_at != 0) {
    lines.push_back("the program changed phase more than " +
                    std::to_string(phase_changes_capped_at) +
                    " times: later steps were judged with the phase they began in");
  }
  lines.insert(lines.end(), notes.begin(), notes.end());
  return lines;
}

}  // namespace memseal
