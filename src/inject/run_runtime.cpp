// libmemseal_run.so: memseal inside a program that was not built for it. The preload shim
// (preload_shim.cpp) loads it once libtorch is in the process and calls memseal_run_activate(),
// which starts a leak detector and decides where the program's steps end (step_source.h). Reports
// (run_reports.cpp) go to the directory the launcher named (run_protocol.h): at exit, when SIGINT
// or SIGTERM would end the program, and on SIGUSR1 while it runs.
//
// The program is not ours: memseal takes a signal only where the program left its default action
// (a handler the program installs later wins), keeps one thread of its own, and leaves the
// detector alive at exit (other threads of the program may still allocate).
#include "inject/run_runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "inject/node_gather.h"
#include "inject/python_lock.h"
#include "inject/run_files.h"
#include "inject/run_protocol.h"
#include "inject/run_python_plugin.h"
#include "inject/time_windows.h"
#include "track/grad_fn_observer.h"
#include "track/python_frames.h"
#include "track/session.h"

namespace memseal::inject {

namespace {

const char* kindName(ProcessKind kind) {
  constexpr const char* kNames[] = {"root", "exec", "fork"};  // in ProcessKind's order
  return kNames[static_cast<int>(kind)];
}

// One byte per event on the self-pipe: a signal number, or these.
constexpr unsigned char kWakeStop = 0;

Runtime* g_runtime = nullptr;
const int kHandledSignals[] = {SIGUSR1, SIGINT, SIGTERM};

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

// Called from Python's atexit (run_python_frames.cpp), before the interpreter finalises: the
// program's own code has ended, its globals still hold what its loop kept, and Python lines can
// still be read, which the report at exit (after finalisation) cannot.
void onPythonExit() {
  Runtime* runtime = g_runtime;
  if (runtime == nullptr || runtime->pid != getpid() || runtime->inert.load()) return;
  programCodeEnded(*runtime);
}

// Python's own after-fork hook in a child of os.fork(): its GIL and thread states are remade.
void onPythonReadyInForkedChild() {
  g_python_ready_after_fork.store(true, std::memory_order_release);
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
      forkedChild(*runtime) || !runtime->framework_steps || kind < 0 || kind > 2) {
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

// The runtime's own thread: time windows, the step rule's decisions, signals.
void runThread(Runtime* runtime) {
  if (runtime->rank && runtime->the_rank_itself && !forkedChild(*runtime)) {
    announceToNodeZero(*runtime->rank);
  }
  for (;;) {
    watchStepsOnceTorchIsImported(*runtime);
    auto wait = runtime->step_source->untilNextTick();
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
      runtime->step_source->tick();
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
  writeFinalReport(*runtime, runtime->config.gather_timeout);
}

void beforeFork() {
  (void)pythonInitialized();  // its dlsym here, where no lock of the loader can be left held
  if (g_runtime != nullptr && g_runtime->steps) g_runtime->steps->mutex().lock();
}

void afterForkInParent() {
  if (g_runtime != nullptr && g_runtime->steps) g_runtime->steps->mutex().unlock();
}

// The parent's detector, steps and step sources describe the parent: in the child they are
// abandoned, never called or destroyed (the autograd nodes the detector keeps may hold Python
// objects, which must not be released inside fork()), and the parent's tracking ends. The child
// gets a detector of its own (DetectorOptions::forked_from_pid: its private memory is judged, not
// the pages it still shares with its parent), its steps time windows sized to its run. False when
// it cannot start.
bool startForkedChildDetector(Runtime& runtime) {
  track::setGradFnObserver(nullptr);
  track::stopSession();
  (void)runtime.steps.release();
  (void)runtime.step_source.release();
  (void)runtime.framework_steps.release();
  DetectorOptions options = runtime.detector_options;
  options.forked_from_pid = getppid();
  try {
    runtime.detector = new LeakDetector(options);
  } catch (const std::exception& error) {
    std::cerr << "memseal run: cannot start tracking in forked child " << runtime.pid << ": "
              << error.what() << "\n";
    return false;
  }
  Runtime* raw = &runtime;
  runtime.steps = std::make_unique<StepLedger>(*runtime.detector, [raw] { reportAfterStep(*raw); });
  runtime.step_source =
      std::make_unique<IntervalSteps>(std::chrono::nanoseconds::zero(), *runtime.steps);
  return true;
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
  // Locks another thread of the parent held at fork() are made anew.
  runtime->pid = getpid();
  runtime->kind = ProcessKind::kFork;
  runtime->final_written = false;
  new (&runtime->report_mutex) std::mutex();
  new (&runtime->boundary_mutex) std::mutex();
  runtime->program_end = detect::ProgramEnd();
  runtime->boundary_times = BoundaryReportTimes();
  runtime->memory_trace = nullptr;  // the parent's history, not the child's
  if (pythonInitialized()) g_python_ready_after_fork.store(false, std::memory_order_release);
  if (!startForkedChildDetector(*runtime)) {
    runtime->inert.store(true);
    giveSignalsBack();
    return;
  }
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
  bool ops_chosen = true;
  try {
    ops_chosen = TrackerOptions::fromEnvironment().watch_ops.has_value();
  } catch (const std::invalid_argument&) {
    // A value misspelt in the environment: chosen, and refused with its variable's name when the
    // detector starts.
  }
  if (!ops_chosen) options.tracker.watch_ops = OpWatching::everyStep();
  // A Python program's report shows its Python lines and folds native frames: unwinding those
  // for every tensor would cost more than the op (a GPU loop's step doubled), so unless the user
  // asks for native stacks, only the Python frames are taken.
  const char* stacks = std::getenv(TrackerOptions::environmentVariable("stacks").c_str());
  bool python_frames = startPythonFrames(&onPythonExit, &onPythonReadyInForkedChild);
  runtime->python_program = python_frames;
  if (python_frames && (stacks == nullptr || *stacks == '\0')) {
    options.tracker.stacks = StackMode::kPython;
  }
  runtime->detector_options = options;
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
