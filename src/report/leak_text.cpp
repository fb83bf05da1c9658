// LeakReport as text for people: the verdict, then one card per finding (what grows, where it is
// made, an example tensor, what the cause holds, and the fix).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/text.h"
#include "detect/diagnosis.h"
#include "detect/growth_criterion.h"
#include "memseal/leak_detector.h"
#include "report/text_format.h"

namespace memseal {

namespace {

constexpr std::size_t kPartsShown = 12;
constexpr const char* kIndent = "              ";

// "aten::addmm (inside SGD.step)": a profiler range shows as what the user called.
std::string opText(const AllocationSite& site) {
  std::string text = common::shownOpName(site.op);
  if (!site.outer_op.empty() && site.outer_op != site.op) {
    text += " (inside " + common::shownOpName(site.outer_op) + ")";
  }
  return text;
}

// Tensors kept with their autograd graphs: what the graphs cost beyond the storage, as the
// process's resident growth per step (", resident memory +9.0 KiB/step"), when it is more.
std::string graphCostText(const LeakFinding& finding) {
  if (finding.resident_bytes_per_step <= finding.bytes_per_step) return "";
  return ", resident memory +" +
         report::bytesText(static_cast<std::int64_t>(finding.resident_bytes_per_step)) + "/step";
}

std::string rateText(const LeakFinding& finding) {
  char rate[256];
  std::string per_step = report::bytesText(static_cast<std::int64_t>(finding.bytes_per_step));
  if (finding.category == LeakCategory::kUntrackedGrowth && finding.retained == "private memory") {
    // A forked child's (DetectorOptions::forked_from_pid): copy-on-write.
    std::snprintf(
        rate, sizeof(rate),
        "private memory +%s/step beyond what tracked tensors and graphs explain (+%s/step)",
        per_step.c_str(),
        report::bytesText(static_cast<std::int64_t>(finding.explained_bytes_per_step)).c_str());
  } else if (finding.category == LeakCategory::kUntrackedGrowth) {
    std::snprintf(
        rate, sizeof(rate),
        "resident memory +%s/step beyond what tracked tensors and graphs explain "
        "(+%s/step)",
        per_step.c_str(),
        report::bytesText(static_cast<std::int64_t>(finding.explained_bytes_per_step)).c_str());
  } else if (finding.retained == "autograd graph nodes") {
    std::snprintf(rate, sizeof(rate),
                  "%.2g autograd graph/step kept alive (%u of %u watched steps), resident memory "
                  "+%s/step",
                  finding.count_per_step, finding.steps_with_survivors, finding.steps_observed,
                  per_step.c_str());
  } else {
    std::snprintf(rate, sizeof(rate), "+%s/step, %.3g tensor%s/step (%lld retained, %s)",
                  per_step.c_str(), finding.count_per_step,
                  finding.count_per_step == 1.0 ? "" : "s",
                  static_cast<long long>(finding.survivors),
                  report::bytesText(finding.survivor_bytes).c_str());
    return rate + graphCostText(finding);
  }
  return rate;
}

std::string partText(const LeakPart& part) {
  std::string text;
  if (part.retained == "autograd graph nodes") {
    char rate[64];
    std::snprintf(rate, sizeof(rate), "%.2g graph/step", part.count_per_step);
    text = std::string(rate) + "  kept by the output of " + opText(part.site);
  } else {
    text = "+" + report::bytesText(static_cast<std::int64_t>(part.bytes_per_step)) + "/step  " +
           opText(part.site);
  }
  if (part.tensor.known) {
    std::string shape = detect::shapeRangeText(part.shapes);
    text += "  " + (shape.empty() ? common::shapeText(part.tensor.shape) : shape) + " " +
            part.tensor.dtype;
    if (!part.tensor.grad_fn.empty()) text += " " + part.tensor.grad_fn;
  }
  return text;
}

// What a cause held before it was freed together: when, how often, and the most it held.
std::string heldText(const HeldUntilFreed& freed) {
  std::string phase = freed.phase.empty() ? "" : " of phase \"" + freed.phase + "\"";
  std::string text;
  if (freed.times <= 1) {
    text = "steps " + std::to_string(freed.first_step) + "-" + std::to_string(freed.last_step) +
           phase + ", then freed together in step " + std::to_string(freed.freed_at_step);
  } else {
    std::string iterations =
        freed.iterations_per_time > 0
            ? " (~" + std::to_string(static_cast<long long>(freed.iterations_per_time + 0.5)) +
                  " iterations of its loop)"
            : "";
    text = "built up and freed together " + std::to_string(freed.times) + " times (every ~" +
           std::to_string(static_cast<long long>(freed.steps_per_time + 0.5)) + " steps" +
           iterations + ", steps " + std::to_string(freed.first_step) + "-" +
           std::to_string(freed.last_step) + phase + ")";
  }
  text += "; at most " + report::bytesText(freed.peak_bytes) +
          (freed.times > 1 ? " each time" : "") +
          (freed.building_up ? "; building up again now" : "");
  return text;
}

std::string phasesText(const std::vector<PhaseSummary>& phases) {
  std::string text;
  for (const PhaseSummary& phase : phases) {
    text += text.empty() ? "" : ", ";
    text += "\"" + (phase.name.empty() ? std::string("(unnamed)") : phase.name) + "\" " +
            common::countedText(phase.steps, "step");
    if (phase.runs > 1) text += " in " + std::to_string(phase.runs) + " runs";
    if (!phase.backward_ran) text += ", no backward";
  }
  return text;
}

// "kept by" lines: what holds finding `index` (Python's heap), the path to its root.
void writeHolders(std::ostringstream& out, const std::vector<LeakHolder>& holders, int index) {
  bool first = true;
  for (const LeakHolder& holder : holders) {
    if (holder.finding != index) continue;
    std::string text = holder.description;
    if (holder.tensors > 1)
      text += ", holds " + std::to_string(holder.tensors) + " of the tensors sampled";
    out << (first ? "    kept by   " : kIndent) << report::wrap(text, 88, kIndent) << "\n";
    first = false;
  }
}

// Under the verdict: the phases of the steps, when more than one, and where the steps came from.
void writeStepsContext(std::ostringstream& out, const LeakReport& leak_report) {
  if (leak_report.phases.size() > 1) {
    out << "phases: " << report::wrap(phasesText(leak_report.phases), 94, "        ") << "\n";
  }
  for (const std::string& line : leak_report.steps_from) {
    out << "steps: " << report::wrap(line, 94, "       ") << "\n";
  }
}

// The verdict when nothing was judged: "no leak in 0 steps" would read as a clean bill.
void writeTooFewSteps(std::ostringstream& out, const LeakReport& leak_report) {
  std::uint32_t steps = leak_report.steps;
  out << "memseal: too few steps to judge: " << common::countedText(steps, "step") << ", "
      << std::min(steps, leak_report.warmup) << " of them warm-up; a leak is judged over at least "
      << detect::kMinJudgedSteps << " steps after the warm-up";
  if (leak_report.origin.forked_from_pid != 0) {
    // Its steps are time windows, and a window without memory activity is no step.
    out << " (a forked child's steps are the time windows in which it allocated or freed memory: "
           "one that mostly waits, as an idle worker does, takes few)";
  } else {
    out << " (run more steps, or fewer warm-up steps with --warmup)";
  }
}

}  // namespace

std::string LeakReport::toText() const {
  std::ostringstream out;
  std::uint32_t observed = steps > warmup ? steps - warmup : 0;
  if (rank) {
    out << "memseal: rank " << rank->rank << " of " << rank->world_size << " (local rank "
        << rank->local_rank
        << (rank->nodes > 1 && rank->node >= 0
                ? " on node " + std::to_string(rank->node) + " of " + std::to_string(rank->nodes)
                : "")
        << (rank->run_id.empty() ? "" : ", job " + rank->run_id) << ")\n";
  }
  if (!leak) {
    if (observed < detect::kMinJudgedSteps) {
      writeTooFewSteps(out, *this);
    } else {
      out << "memseal: no leak in " << observed << " steps after " << warmup << " warm-up steps";
    }
    if (!per_step.empty()) {
      out << " (tensor memory " << report::bytesText(per_step.back().live_bytes)
          << " live at the end)";
    }
    out << "\n";
    writeStepsContext(out, *this);
    for (const std::string& note : noteLines())
      out << "note: " << report::wrap(note, 94, "      ") << "\n";
    return out.str();
  }
  out << "memseal: LEAK: " << common::countedText(findings.size(), "finding") << " in " << observed
      << " steps after " << warmup << " warm-up steps";
  if (detected_at_step) out << " (clear from step " << *detected_at_step << " on)";
  out << "\n";
  writeStepsContext(out, *this);
  int index = 0;
  for (const LeakFinding& finding : findings) {
    out << "\n[" << ++index << "] " << categoryId(finding.category) << "\n";
    out << "    grows     " << rateText(finding) << "\n";
    if (finding.freed) {
      out << "    held      " << report::wrap(heldText(*finding.freed), 88, kIndent) << "\n";
    }
    if (finding.category != LeakCategory::kUntrackedGrowth) {
      out << "    made by   " << opText(finding.site);
      if (!finding.site.scope.empty()) out << "  in scope " << finding.site.scope;
      out << "\n";
      std::vector<std::string> lines = report::stackLines(finding.site.frames);
      for (std::size_t i = 0; i < lines.size(); ++i) {
        out << (i == 0 ? "    at        " : kIndent) << lines[i] << "\n";
      }
      out << "    tensor    " << report::tensorText(finding.tensor) << "\n";
      std::string shapes = detect::shapeRangeText(finding.shapes);
      if (!shapes.empty()) out << "    shapes    " << shapes << "\n";
      if (finding.parts.size() > 1) {
        for (std::size_t i = 0; i < finding.parts.size() && i < kPartsShown; ++i) {
          out << (i == 0 ? "    holds     " : kIndent) << partText(finding.parts[i]) << "\n";
        }
        if (finding.parts.size() > kPartsShown) {
          out << kIndent << "... " << finding.parts.size() - kPartsShown << " more\n";
        }
      }
    }
    writeHolders(out, holders, index - 1);
    out << "    fix       " << report::wrap(finding.hint, 88, kIndent) << "\n";
  }
  std::vector<std::string> all_notes = noteLines();
  for (const LeakHolder& holder : holders) {
    if (holder.finding < 0) all_notes.push_back(holder.description);
  }
  if (!all_notes.empty()) out << "\n";
  for (const std::string& note : all_notes) {
    out << "note: " << report::wrap(note, 94, "      ") << "\n";
  }
  return out.str();
}

}  // namespace memseal
