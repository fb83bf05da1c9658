// The state of memseal inside a program that `memseal run` runs (libmemseal_run.so), shared by its
// two halves: run_runtime.cpp starts it and follows the process's life (its thread, signals,
// fork(), exit); run_reports.cpp takes the reports and writes them to the run's folder.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "detect/program_end.h"
#include "inject/build_up_probe.h"
#include "inject/framework_steps.h"
#include "inject/run_config.h"
#include "inject/run_holders.h"
#include "inject/run_python_plugin.h"
#include "inject/step_ledger.h"
#include "inject/step_source.h"
#include "inject/time_scale.h"
#include "memseal/leak_detector.h"
#include "memseal/memory_trace.h"

namespace memseal::inject {

// The program itself, a process it exec'd, or one it forked (not exec'd).
enum class ProcessKind { kRoot, kExec, kFork };

// When the runtime takes its reports at step boundaries.
struct BoundaryReportTimes {
  std::chrono::steady_clock::time_point next_report{};
  std::chrono::steady_clock::time_point next_interim_write{};
  bool interim_said_leak = false;  // the verdict of the last interim report written
  bool reporting = false;          // one report at a time
};

struct Runtime {
  RunConfig config;
  ProcessKind kind = ProcessKind::kRoot;
  pid_t pid = 0;
  std::optional<RankIdentity> rank;  // a distributed job's rank (torchrun's RANK, WORLD_SIZE)
  bool the_rank_itself = false;  // not a process it started, which inherits RANK (node_gather.h)
  DetectorOptions detector_options;     // the detector's, and a forked child's detector's
  LeakDetector* detector = nullptr;     // never destroyed: the program may allocate until the end
  MemoryTrace* memory_trace = nullptr;  // with --memory-viz; never destroyed, like the detector
  std::unique_ptr<StepLedger> steps;    // the steps taken, whichever source ends them
  std::unique_ptr<StepSource> step_source;  // the rule's: op loops, --step-on, --interval
  // A Python program's own signals (optimizer steps, loader batches, module calls), which end the
  // steps from the first one on; watched once `import torch` has finished (watch_steps_pending).
  std::unique_ptr<FrameworkSteps> framework_steps;
  std::atomic<bool> watch_steps_pending{false};
  RunHolders holders{&findPythonHolders};  // what holds a Python program's leaks
  int wake_pipe[2] = {-1, -1};
  std::thread thread;
  std::atomic<bool> inert{false};  // a forked child not followed: reports nothing
  std::mutex report_mutex;
  bool final_written = false;
  // Reports taken at step boundaries while the program runs (the program's end is judged from
  // them: by the time exit handlers run, main() has returned or Python has finalised, and what the
  // loop kept is freed), when the next is due, and the interim report streamed from them.
  std::mutex boundary_mutex;
  detect::ProgramEnd program_end;
  BoundaryReportTimes boundary_times;
  bool python_program = false;  // Python frames were found: its holders can be searched for
  BuildUpProbe build_up_probe{scaledByTimeScale(std::chrono::seconds(1))};
};

// This process's file of the run's folder: its pid and `suffix` (run_protocol.h).
inline std::string runFile(const Runtime& runtime, const char* suffix) {
  return runtime.config.directory + "/" + std::to_string(runtime.pid) + suffix;
}

inline bool forkedChild(const Runtime& runtime) { return runtime.kind == ProcessKind::kFork; }

// What the detector says now, with where the steps came from (what each step source took); with
// `loop_ended_at`, as of the step the program's loop ended at (LeakDetector::report). Takes the
// GIL, then the step lock.
LeakReport currentReport(Runtime& runtime,
                         std::optional<std::uint32_t> loop_ended_at = std::nullopt);

enum class BoundaryReportWhen { kAfterThePause, kNow };
// A report taken at a step boundary, kept for the program's end (detect::ProgramEnd) and streamed
// to the launcher; see run_reports.cpp.
void takeBoundaryReport(Runtime& runtime, BoundaryReportWhen when);
// After each step, on the thread that took it.
void reportAfterStep(Runtime& runtime);
// A Python program's own code has ended (its atexit): the last report that can read Python lines.
void programCodeEnded(Runtime& runtime);

// The report, written to the run's folder, as JSON: the report now and its text too
// (`also_text`, SIGUSR1), or the final one.
std::string writeReport(Runtime& runtime, bool also_text);
// The final report, once: at exit, or before SIGINT/SIGTERM end the program. `gather_timeout`: how
// long rank 0 of a job across machines waits for the other nodes' reports.
void writeFinalReport(Runtime& runtime, std::chrono::milliseconds gather_timeout);

}  // namespace memseal::inject
