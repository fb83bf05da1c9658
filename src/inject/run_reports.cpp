// The reports of a program under `memseal run`: taken at step boundaries while it runs (the
// program's end is judged from them: by the time exit handlers run, main() has returned or Python
// has finalised, and what the loop kept is freed), streamed to the launcher so that a crash or a
// kill still leaves the latest, and written at exit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inject/node_gather.h"
#include "inject/python_lock.h"
#include "inject/run_files.h"
#include "inject/run_protocol.h"
#include "inject/run_report_edits.h"
#include "inject/run_runtime.h"
#include "report/steps_taken.h"
#include "track/memory_counters.h"

namespace memseal::inject {

using detect::ProgramCodeEnded;

namespace {

constexpr std::chrono::seconds kInterimReportEvery{1};
constexpr std::size_t kInterimSteps = 256;  // per-step samples an interim report keeps

std::uint64_t stepsTaken(Runtime& runtime) { return runtime.steps->taken(); }

// At exit: the report the detector gives now, or the last one taken at a step boundary while the
// loop ran (detect::ProgramEnd). Where time windows saw the program tear down, the detector judges
// again as of the step its loop ended at: what the teardown freed was held until then.
LeakReport finalReport(Runtime& runtime) {
  LeakReport now = currentReport(runtime);
  std::int64_t live_bytes_now = track::cpuCounters().liveBytes();
  bool time_windows = forkedChild(runtime) || runtime.config.rule.kind == StepRule::Kind::kInterval;
  std::optional<std::uint32_t> loop_ended_at;
  {
    std::lock_guard<std::mutex> lock(runtime.boundary_mutex);
    loop_ended_at = runtime.program_end.loopEndedAt(now, live_bytes_now, time_windows);
  }
  if (loop_ended_at) now = currentReport(runtime, loop_ended_at);
  devicesAtTheLastStep(now);
  std::lock_guard<std::mutex> lock(runtime.boundary_mutex);
  return runtime.program_end.atExit(std::move(now), loop_ended_at,
                                    std::chrono::steady_clock::now());
}

// The allocator's history up to now, for torch.cuda._memory_viz: written once, with the final
// report (at exit, or before SIGINT/SIGTERM end the program), so an out-of-memory error that ends
// the program is in it.
void writeMemoryViz(Runtime& runtime) {
  if (runtime.memory_trace == nullptr) return;
  try {
    runtime.memory_trace->writeMemoryViz(runFile(runtime, kMemoryVizSuffix));
  } catch (const std::exception& error) {
    std::cerr << "memseal run: cannot write the memory_viz trace: " << error.what() << "\n";
  }
}

}  // namespace

LeakReport currentReport(Runtime& runtime, std::optional<std::uint32_t> loop_ended_at) {
  PythonLock python;
  // Before the step lock: a source takes its own lock, then the step lock.
  std::vector<report::StepsTaken> steps_taken;
  std::vector<std::pair<std::string, double>> iterations;
  StepSource* sources[] = {runtime.step_source.get(), runtime.framework_steps.get()};
  for (StepSource* source : sources) {
    if (source == nullptr) continue;  // a forked child's steps are its time windows alone
    std::vector<report::StepsTaken> taken = source->stepsTaken();
    steps_taken.insert(steps_taken.end(), taken.begin(), taken.end());
    auto ratios = source->iterationsPerStep();
    iterations.insert(iterations.end(), ratios.begin(), ratios.end());
  }
  std::vector<std::string> steps_from = report::stepsFromLines(steps_taken);
  std::lock_guard<std::mutex> steps(runtime.steps->mutex());
  LeakReport report =
      loop_ended_at ? runtime.detector->report(*loop_ended_at) : runtime.detector->report();
  report.rank = runtime.rank;
  periodsInIterations(report, iterations);
  report.steps_from = std::move(steps_from);
  return report;
}

// A report to fall back on at exit, when main() has returned (or Python has finalised) and what
// the loop kept is freed. Right after a step ends, 100 ms or more apart (a twentieth of the time in
// reports at most) unless a build-up is in progress (build_up_probe.h: its holders are searched at
// once), on the thread that ended the step, after the step lock is released (currentReport takes
// the GIL first). And once more as Python begins to finalise (kNow).
void takeBoundaryReport(Runtime& runtime, BoundaryReportWhen when) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point now = Clock::now();
  if (runtime.inert.load()) return;
  std::int64_t live = track::cpuCounters().liveBytes();
  bool after_step = when == BoundaryReportWhen::kAfterThePause;
  bool building_up = false;
  BoundaryReportTimes& times = runtime.boundary_times;
  {
    std::lock_guard<std::mutex> lock(runtime.boundary_mutex);
    building_up =
        after_step && runtime.python_program && runtime.build_up_probe.reportNow(live, now);
    if ((after_step && now < times.next_report && !building_up) || times.reporting) return;
    times.reporting = true;
  }
  std::uint64_t steps = stepsTaken(runtime);
  LeakReport report = currentReport(runtime);
  std::int64_t live_after = track::cpuCounters().liveBytes();
  std::uint64_t steps_after = stepsTaken(runtime);
  if (!forkedChild(runtime)) {
    runtime.holders.attach(report, !after_step   ? RunHolders::When::kCodeEnded
                                   : building_up ? RunHolders::When::kEarly
                                                 : RunHolders::When::kWhenDue);
  }
  Clock::time_point done = Clock::now();
  std::lock_guard<std::mutex> lock(runtime.boundary_mutex);
  times.reporting = false;
  Clock::duration shortest = scaledByTimeScale(std::chrono::milliseconds(100));
  times.next_report = done + std::max<Clock::duration>(shortest, 20 * (done - now));
  // Taken for the holders of a build-up not yet judged: at exit it is no report to fall back on
  // (the program's last pass, still gathering as it ended, would read as a leak).
  if (building_up) return;
  const LeakReport* kept = runtime.program_end.atStepBoundary(std::move(report), live, live_after,
                                                              steps, steps_after, done);
  if (kept == nullptr) return;  // made as the program tore down
  if (forkedChild(runtime)) {
    // Its final report, as far as it goes: a forked worker ends in _exit, without exit handlers.
    writeFileWhole(runFile(runtime, kReportSuffix), kept->toJson());
    return;
  }
  // Streamed to the launcher, so a crash or a kill still leaves the latest report: once a second,
  // and at once when the verdict changes (a kill right after a leak shows itself still finds it).
  if (done >= times.next_interim_write || kept->leak != times.interim_said_leak) {
    times.next_interim_write = done + scaledByTimeScale(kInterimReportEvery);
    times.interim_said_leak = kept->leak;
    writeFileWhole(runFile(runtime, kInterimReportSuffix), interimReportJson(*kept, kInterimSteps));
  }
}

void reportAfterStep(Runtime& runtime) {
  takeBoundaryReport(runtime, BoundaryReportWhen::kAfterThePause);
}

void programCodeEnded(Runtime& runtime) {
  {
    std::lock_guard<std::mutex> lock(runtime.boundary_mutex);
    runtime.program_end.codeEnded(
        ProgramCodeEnded{stepsTaken(runtime), track::cpuCounters().liveBytes()});
  }
  takeBoundaryReport(runtime, BoundaryReportWhen::kNow);
}

std::string writeReport(Runtime& runtime, bool also_text) {
  LeakReport report = also_text ? currentReport(runtime) : finalReport(runtime);
  if (!forkedChild(runtime)) runtime.holders.attach(report, RunHolders::When::kNever);
  std::string json = report.toJson();
  bool written = writeFileWhole(runFile(runtime, kReportSuffix), json);
  if (!written && !also_text) {
    // The launcher will find no report: this process says its own, so the verdict is not lost.
    std::cerr << "memseal run: report of pid " << runtime.pid << " (not written to "
              << runtime.config.directory << ")\n"
              << report.toText() << std::flush;
  }
  if (!also_text) return json;
  std::string text = "memseal run: report of pid " + std::to_string(runtime.pid) +
                     " while it runs\n" + report.toText();
  if (runtime.config.output.empty()) {
    std::cerr << text << std::flush;
  } else if (!writeFileWhole(runtime.config.output, text)) {
    std::cerr << "memseal run: cannot write " << runtime.config.output << "\n";
  }
  return json;
}

void writeFinalReport(Runtime& runtime, std::chrono::milliseconds gather_timeout) {
  std::lock_guard<std::mutex> lock(runtime.report_mutex);
  if (runtime.final_written) return;
  runtime.final_written = true;
  std::string json = writeReport(runtime, false);
  writeMemoryViz(runtime);
  if (runtime.rank && runtime.the_rank_itself && !forkedChild(runtime)) {
    shareFinalReport(*runtime.rank, runtime.pid, json, runtime.config.directory, gather_timeout);
  }
}

}  // namespace memseal::inject
