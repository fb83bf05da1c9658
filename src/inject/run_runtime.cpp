// libmemseal_run.so: memseal inside a program that was not built for it. The preload shim
// (preload_shim.cpp) loads it once libtorch is in the process and calls memseal_run_activate(),
// which starts a leak detector and decides where the program's steps end (step_source.h). Reports
// go to the directory the launcher named (run_protocol.h): at exit, when SIGINT or SIGTERM would
// end the program, and on SIGUSR1 while it runs.
//
// The program is not ours: memseal takes a signal only where the program left its default action
// (a handler the program installs later wins), keeps one thread of its own, and leaves the
// detector alive at exit (other threads of the program may still allocate).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "detect/program_end.h"
#include "inject/build_up_probe.h"
#include "inject/fork_child_watch.h"
#include "inject/framework_steps.h"
#include "inject/node_gather.h"
#include "inject/python_lock.h"
#include "inject/run_config.h"
#include "inject/run_files.h"
#include "inject/run_holders.h"
#include "inject/run_protocol.h"
#include "inject/run_python_plugin.h"
#include "inject/run_report_edits.h"
#include "inject/step_ledger.h"
#include "inject/step_source.h"
#include "inject/time_scale.h"
#include "memseal/leak_detector.h"
#include "memseal/memory_trace.h"
#include "track/memory_counters.h"
#include "track/python_frames.h"

namespace memseal::inject {

using detect::ProgramCodeEnded;

namespace {

enum class ProcessKind { kRoot, kExec, kFork };
const char* kindName(ProcessKind kind) {
  constexpr const char* kNames[] = {"root", "exec", "fork"};  // in ProcessKind's order
  return kNames[static_cast<int>(kind)];
}

// One byte per event on the self-pipe: a signal number, or these.
constexpr unsigned char kWakeStop = 0;

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
  LeakDetector* detector = nullptr;     // never destroyed: the program may allocate until the end
  MemoryTrace* memory_trace = nullptr;  // with --memory-viz; never destroyed, like the detector
  std::unique_ptr<StepLedger> steps;    // the steps taken, whichever source ends them
  std::unique_ptr<StepSource> step_source;  // the rule's: op loops, --step-on, --interval
  // A Python program's own signals (optimizer steps, loader batches, module calls), which end the
  // steps from the first one on; watched once `import torch` has finished (watch_steps_pending).
  std::unique_ptr<FrameworkSteps> framework_steps;
  std::atomic<bool> watch_steps_pending{false};
  std::unique_ptr<ForkChildWatch> fork_watch;  // in a forked child, instead of the detector
  RunHolders holders{&findPythonHolders};      // what holds a Python program's leaks
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

Runtime* g_runtime = nullptr;
const int kHandledSignals[] = {SIGUSR1, SIGINT, SIGTERM};

// This process's file of the run's folder: its pid and `suffix` (run_protocol.h).
std::string runFile(const Runtime& runtime, const char* suffix) {
  return runtime.config.directory + "/" + std::to_string(runtime.pid) + suffix;
}

void writeStatus(const Runtime& runtime) {
  std::string status = "pid=" + std::to_string(runtime.pid) +
                       "\nppid=" + std::to_string(getppid()) + "\nkind=" + kindName(runtime.kind) +
                       "\nprogram=" + programName() + "\n";
  if (runtime.rank && runtime.kind != ProcessKind::kFork) {
    status += "rank=" + std::to_string(runtime.rank->rank) +
              "\nlocal_rank=" + std::to_string(runtime.rank->local_rank) +
              "\nworld_size=" + std::to_string(runtime.rank->world_size) +
              "\nrun_id=" + runtime.rank->run_id + "\nnode=" + std::to_string(runtime.rank->node) +
              "\nnodes=" + std::to_string(runtime.rank->nodes) + "\n";
  }
  writeFileWhole(runFile(runtime, kStatusSuffix), status);
}

std::uint64_t stepsTaken(Runtime& runtime) { return runtime.steps->taken(); }

LeakReport currentReport(Runtime& runtime) {
  if (runtime.fork_watch) return runtime.fork_watch->report();
  PythonLock python;
  // Before the step lock: a source takes its own lock, then the step lock.
  std::vector<std::string> description;
  std::vector<std::pair<std::string, double>> iterations;
  StepSource* sources[] = {runtime.step_source.get(), runtime.framework_steps.get()};
  for (StepSource* source : sources) {
    std::vector<std::string> lines = source->description();
    description.insert(description.end(), lines.begin(), lines.end());
    auto ratios = source->iterationsPerStep();
    iterations.insert(iterations.end(), ratios.begin(), ratios.end());
  }
  std::lock_guard<std::mutex> steps(runtime.steps->mutex());
  LeakReport report = runtime.detector->report();
  report.rank = runtime.rank;
  periodsInIterations(report, iterations);
  report.steps_from = std::move(description);
  return report;
}

enum class BoundaryReportWhen { kAfterThePause, kNow };

constexpr std::chrono::seconds kInterimReportEvery{1};
constexpr std::size_t kInterimSteps = 256;  // per-step samples an interim report keeps

// A report to fall back on at exit, when main() has returned (or Python has finalised) and what
// the loop kept is freed. Right after a step ends, 100 ms or more apart (a twentieth of the time in
// reports at most) unless a build-up is in progress (build_up_probe.h: its holders are searched at
// once), on the thread that ended the step, after the step lock is released (currentReport takes
// the GIL first). And once more as Python begins to finalise (kNow).
void takeBoundaryReport(Runtime& runtime, BoundaryReportWhen when) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point now = Clock::now();
  if (runtime.fork_watch || runtime.inert.load()) return;
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
  runtime.holders.attach(report, !after_step   ? RunHolders::When::kCodeEnded
                                 : building_up ? RunHolders::When::kEarly
                                               : RunHolders::When::kWhenDue);
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

// Called from Python's atexit (run_python_frames.cpp), before the interpreter finalises: the
// program's own code has ended, its globals still hold what its loop kept, and Python lines can
// still be read, which the report at exit (after finalisation) cannot.
void onPythonExit() {
  Runtime* runtime = g_runtime;
  if (runtime == nullptr || runtime->pid != getpid() || runtime->inert.load()) return;
  {
    std::lock_guard<std::mutex> lock(runtime->boundary_mutex);
    runtime->program_end.codeEnded(
        ProgramCodeEnded{stepsTaken(*runtime), track::cpuCounters().liveBytes()});
  }
  takeBoundaryReport(*runtime, BoundaryReportWhen::kNow);
}

// At exit: the report the detector gives now, or the last one taken at a step boundary while the
// loop ran (detect::ProgramEnd).
LeakReport finalReport(Runtime& runtime) {
  LeakReport now = currentReport(runtime);
  if (runtime.fork_watch) return now;
  std::int64_t live_bytes_now = track::cpuCounters().liveBytes();
  devicesAtTheLastStep(now);
  std::lock_guard<std::mutex> lock(runtime.boundary_mutex);
  return runtime.program_end.atExit(std::move(now), live_bytes_now,
                                    runtime.config.rule.kind == StepRule::Kind::kInterval,
                                    std::chrono::steady_clock::now());
}

// The report written, as JSON.
std::string writeReport(Runtime& runtime, bool also_text) {
  LeakReport report = also_text ? currentReport(runtime) : finalReport(runtime);
  if (!runtime.fork_watch) runtime.holders.attach(report, RunHolders::When::kNever);
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

void onSignal(int signal_number) {
  int saved_errno = errno;
  if (g_runtime != nullptr && g_runtime->wake_pipe[1] >= 0) {
    unsigned char byte = static_cast<unsigned char>(signal_number);
    ssize_t ignored = write(g_runtime->wake_pipe[1], &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

void takeSignalsLeftAtDefault() {
  for (int signal_number : kHandledSignals) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) != 0) continue;
    if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO) != 0) continue;
    struct sigaction ours {};
    ours.sa_handler = &onSignal;
    sigemptyset(&ours.sa_mask);
    ours.sa_flags = SA_RESTART;
    sigaction(signal_number, &ours, nullptr);
  }
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

// `gather_timeout`: how long rank 0 of a job across machines waits for the other nodes' reports
// (none when a signal stops the program).
void writeFinalReport(Runtime& runtime, std::chrono::milliseconds gather_timeout) {
  std::lock_guard<std::mutex> lock(runtime.report_mutex);
  if (runtime.final_written) return;
  runtime.final_written = true;
  std::string json = writeReport(runtime, false);
  writeMemoryViz(runtime);
  if (runtime.rank && runtime.the_rank_itself && !runtime.fork_watch) {
    shareFinalReport(*runtime.rank, runtime.pid, json, runtime.config.directory, gather_timeout);
  }
}

// Signals the runtime took go back to their default action where no thread of the runtime acts on
// them (a forked child that is not watched, a thread that could not start): the handler would
// write to nothing, and SIGTERM would no longer end the program (a pool's terminate() would hang).
void giveSignalsBack() {
  for (int signal_number : kHandledSignals) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) == 0 && current.sa_handler == &onSignal) {
      signal(signal_number, SIG_DFL);
    }
  }
}

// One of the program's own step signals (step_hooks.py), on its thread, with the GIL held.
void onStepSignal(int kind, unsigned long long object, const char* name) {
  Runtime* runtime = g_runtime;
  // A forked child (a DataLoader's worker) has the hooks too; its steps are not the parent's.
  if (runtime == nullptr || runtime->pid != getpid() || runtime->inert.load() ||
      runtime->fork_watch || !runtime->framework_steps || kind < 0 || kind > 2) {
    return;
  }
  runtime->framework_steps->onEvent(
      StepEvent{static_cast<StepSignal>(kind), object, name != nullptr ? name : "?"});
}

// PyTorch's hooks go in once `import torch` has finished (the runtime starts while torch's
// libraries load, before its Python modules exist); until then, every wake of the runtime's thread
// looks again.
constexpr std::chrono::milliseconds kWatchStepsRetry{20};
void watchStepsOnceTorchIsImported(Runtime& runtime) {
  if (runtime.watch_steps_pending.load() && watchPythonSteps(&onStepSignal) != 0) {
    runtime.watch_steps_pending.store(false);
  }
}

// The runtime's own thread: time windows, the step rule's decisions, signals, and in a forked
// child the windows of its watch.
void runThread(Runtime* runtime) {
  if (runtime->rank && runtime->the_rank_itself && !runtime->fork_watch) {
    announceToNodeZero(*runtime->rank);
  }
  for (;;) {
    watchStepsOnceTorchIsImported(*runtime);
    auto wait = runtime->fork_watch ? runtime->fork_watch->untilNextWindow()
                                    : runtime->step_source->untilNextTick();
    if (runtime->watch_steps_pending.load()) {
      wait = std::min<std::chrono::nanoseconds>(wait, kWatchStepsRetry);
    }
    struct pollfd poll_fd {
      runtime->wake_pipe[0], POLLIN, 0
    };
    int timeout_ms = static_cast<int>(std::max<std::int64_t>(1, wait.count() / 1000000));
    int ready = poll(&poll_fd, 1, timeout_ms);
    if (ready < 0 && errno != EINTR) return;
    if (ready <= 0) {
      if (runtime->inert.load()) continue;
      if (runtime->fork_watch) {
        runtime->fork_watch->window();
        writeFileWhole(runFile(*runtime, kReportSuffix), runtime->fork_watch->report().toJson());
      } else {
        runtime->step_source->tick();
      }
      continue;
    }
    unsigned char event = 0;
    if (read(runtime->wake_pipe[0], &event, 1) != 1) continue;
    if (event == kWakeStop) return;
    if (runtime->inert.load()) continue;
    if (event == SIGUSR1) {
      writeReport(*runtime, true);
      continue;
    }
    // SIGINT or SIGTERM, whose default action ends the program: the report first, then the
    // signal's own action, so the program's exit status is what it would have been.
    writeFinalReport(*runtime, std::chrono::milliseconds::zero());
    signal(event, SIG_DFL);
    kill(getpid(), event);
  }
}

void startThread(Runtime& runtime) {
  if (pipe2(runtime.wake_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
    // The read end blocks in poll() only; reads after poll never wait.
    try {
      runtime.thread = std::thread(runThread, &runtime);
      return;
    } catch (const std::system_error&) {
      // No thread left under the process limit (a child forked at the limit). An exception
      // here would end the program from inside fork().
      close(runtime.wake_pipe[0]);
      close(runtime.wake_pipe[1]);
    }
  }
  // The program goes on without interim reports or time windows; its report is still written
  // when it exits.
  runtime.wake_pipe[0] = runtime.wake_pipe[1] = -1;
  giveSignalsBack();
}

void stopThread(Runtime& runtime) {
  if (!runtime.thread.joinable()) return;
  unsigned char byte = kWakeStop;
  ssize_t ignored = write(runtime.wake_pipe[1], &byte, 1);
  (void)ignored;
  runtime.thread.join();
}

void onExit() {
  Runtime* runtime = g_runtime;
  if (runtime == nullptr || runtime->pid != getpid() || runtime->inert.load()) return;
  stopThread(*runtime);
  if (runtime->fork_watch) runtime->fork_watch->window();
  writeFinalReport(*runtime, runtime->config.gather_timeout);
}

void beforeFork() {
  if (g_runtime != nullptr && g_runtime->steps) g_runtime->steps->mutex().lock();
}

void afterForkInParent() {
  if (g_runtime != nullptr && g_runtime->steps) g_runtime->steps->mutex().unlock();
}

void afterForkInChild() {
  Runtime* runtime = g_runtime;
  if (runtime == nullptr) return;
  if (runtime->steps) runtime->steps->mutex().unlock();
  // The runtime's thread is not in the child; its std::thread must not be joined or destroyed.
  new (&runtime->thread) std::thread();
  runtime->steps->stop();  // the parent's steps are not the child's
  runtime->watch_steps_pending.store(false);
  // The wake-up pipe is the parent's: a signal the child takes must not wake the parent's thread.
  int inherited[2] = {runtime->wake_pipe[0], runtime->wake_pipe[1]};
  runtime->wake_pipe[0] = runtime->wake_pipe[1] = -1;
  for (int fd : inherited) {
    if (fd >= 0) close(fd);
  }
  if (!runtime->config.follow_fork) {
    runtime->inert.store(true);
    giveSignalsBack();
    return;
  }
  // A forked child shares the parent's pages until it writes them. Its report watches tracked
  // tensor memory against private memory (copy-on-write) per time window; the parent's detector
  // state (and its reports) describe the parent, not the child. Locks another thread of the
  // parent held at fork() are made anew.
  runtime->pid = getpid();
  runtime->kind = ProcessKind::kFork;
  runtime->final_written = false;
  new (&runtime->report_mutex) std::mutex();
  new (&runtime->boundary_mutex) std::mutex();
  runtime->program_end = detect::ProgramEnd();
  runtime->boundary_times = BoundaryReportTimes();
  runtime->memory_trace = nullptr;  // the parent's history, not the child's
  runtime->fork_watch = std::make_unique<ForkChildWatch>(getppid());
  writeStatus(*runtime);
  startThread(*runtime);
}

int activate() {
  auto runtime = std::make_unique<Runtime>();
  if (!readConfig(runtime->config)) return 1;
  runtime->pid = getpid();
  const char* root = std::getenv(kEnvRootPid);
  runtime->kind = root != nullptr && std::strtol(root, nullptr, 10) == runtime->pid
                      ? ProcessKind::kRoot
                      : ProcessKind::kExec;
  runtime->rank = rankFromEnvironment();
  const char* rank_pid = std::getenv(kEnvRankPid);  // set by the rank, when this is its child
  runtime->the_rank_itself = rank_pid == nullptr || std::atol(rank_pid) == runtime->pid;
  // What this rank starts inherits RANK: the pid tells the shim there that it is not the rank.
  if (runtime->rank) setenv(kEnvRankPid, std::to_string(runtime->pid).c_str(), 1);
  DetectorOptions options;
  options.warmup = runtime->config.warmup;
  options.on_leak = ReportPolicy::kNone;
  // Steps found by the runtime are not one per iteration in every mode (time windows), so the
  // one-step-in-N replay of op names would not match: ops are watched on every step unless the
  // user asks otherwise, until the steps are counted iterations of a loop (OpLoopSteps).
  bool ops_chosen =
      std::getenv(TrackerOptions::environmentVariable("observe_ops").c_str()) != nullptr;
  if (!ops_chosen) options.tracker.observe_ops = OpWatching::everyStep();
  // A Python program's report shows its Python lines and folds native frames: unwinding those
  // for every tensor would cost more than the op (a GPU loop's step doubled), so unless the user
  // asks for native stacks, only the Python frames are taken.
  const char* stacks = std::getenv(TrackerOptions::environmentVariable("stacks").c_str());
  bool python_frames = startPythonFrames(&onPythonExit);
  runtime->python_program = python_frames;
  if (python_frames && (stacks == nullptr || *stacks == '\0')) {
    options.tracker.stacks = StackMode::kPython;
  }
  try {
    runtime->detector = new LeakDetector(options);
  } catch (const std::exception& error) {
    std::cerr << "memseal run: cannot start tracking: " << error.what() << "\n";
    return 1;
  }
  if (runtime->config.memory_viz_events > 0) {
    try {
      auto trace = std::make_unique<MemoryTrace>(runtime->config.memory_viz_events);
      trace->start();
      runtime->memory_trace = trace.release();
    } catch (const std::exception& error) {
      std::cerr << "memseal run: no memory_viz trace: " << error.what() << "\n";
    }
  }
  Runtime* raw = runtime.get();
  runtime->steps =
      std::make_unique<StepLedger>(*runtime->detector, [raw] { reportAfterStep(*raw); });
  runtime->step_source = makeStepSource(runtime->config.rule, *runtime->steps, !ops_chosen);
  runtime->framework_steps =
      std::make_unique<FrameworkSteps>(*runtime->steps, *runtime->step_source);
  // The program's own steps, unless --op-loops, --step-on or --interval chose another rule.
  runtime->watch_steps_pending.store(python_frames && runtime->config.program_steps &&
                                     runtime->config.rule.kind == StepRule::Kind::kAuto);
  g_runtime = runtime.release();
  writeStatus(*g_runtime);
  startThread(*g_runtime);
  if (g_runtime->thread.joinable()) takeSignalsLeftAtDefault();  // a thread to act on them
  pthread_atfork(&beforeFork, &afterForkInParent, &afterForkInChild);
  std::atexit(&onExit);
  return 0;
}

}  // namespace

}  // namespace memseal::inject

extern "C" __attribute__((visibility("default"))) int memseal_run_activate() {
  static std::once_flag once;
  static int result = 0;
  std::call_once(once, [] { result = memseal::inject::activate(); });
  return result;
}
