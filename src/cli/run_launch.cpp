#include "cli/run_launch.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>

#include "cli/commands.h"

namespace memseal::cli {

namespace {

pid_t g_child = -1;

void forwardSignal(int signal_number) {
  if (g_child > 0) kill(g_child, signal_number);
}

// In the forked child: the environment the injected runtime reads, then exec. On failure, errno
// goes to the parent through `error_pipe`.
[[noreturn]] void becomeTheProgram(const RunOptions& options, const Launch& launch,
                                   int error_pipe) {
  sigaction(SIGPIPE, &launch.broken_pipe, nullptr);
  std::string preload = launch.libraries + "/libmemseal_preload.so";
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing) {
    preload += std::string(":") + existing;
  }
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv(inject::kEnvRuntime, (launch.libraries + "/libmemseal_run.so").c_str(), 1);
  setenv(inject::kEnvDirectory, launch.session.c_str(), 1);
  setenv(inject::kEnvRootPid, std::to_string(getpid()).c_str(), 1);
  setenv(inject::kEnvFollowFork, options.follow_fork ? "1" : "0", 1);
  setenv(inject::kEnvProgramSteps, options.op_loops ? "0" : "1", 1);
  setenv(inject::kEnvStep, launch.step_rule.c_str(), 1);
  setenv(inject::kEnvWarmup, std::to_string(options.warmup).c_str(), 1);
  setenv(inject::kEnvGatherSeconds, std::to_string(options.gather_seconds).c_str(), 1);
  if (!options.output_path.empty()) setenv(inject::kEnvOutput, options.output_path.c_str(), 1);
  if (!options.memory_viz_path.empty()) {
    setenv(inject::kEnvMemoryVizEvents, std::to_string(options.memory_viz_events).c_str(), 1);
  }
  // The program reads the flags as its environment (TrackerOptions::fromEnvironment).
  const TrackerFlags& flags = options.tracker;
  for (const auto& [name, value] :
       {std::pair{"stacks", &flags.stacks}, std::pair{"watch_ops", &flags.watch_ops},
        std::pair{"tensor_metadata", &flags.tensor_metadata}}) {
    if (*value) setenv(TrackerOptions::environmentVariable(name).c_str(), (*value)->c_str(), 1);
  }
  std::vector<char*> argv;
  for (const std::string& argument : options.command) {
    argv.push_back(const_cast<char*>(argument.c_str()));
  }
  argv.push_back(nullptr);
  execv(launch.program.c_str(), argv.data());
  int error = errno;
  ssize_t ignored = write(error_pipe, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

}  // namespace

pid_t forkTheProgram(const RunOptions& options, const Launch& launch, int* exec_errors) {
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    std::cerr << "memseal run: pipe: " << std::strerror(errno) << "\n";
    return -1;
  }
  std::cout.flush();
  std::cerr.flush();
  pid_t child = fork();
  if (child < 0) {
    std::cerr << "memseal run: fork: " << std::strerror(errno) << "\n";
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    return -1;
  }
  if (child == 0) {
    close(exec_pipe[0]);
    becomeTheProgram(options, launch, exec_pipe[1]);
  }
  close(exec_pipe[1]);
  *exec_errors = exec_pipe[0];
  return child;
}

void forwardSignalsTo(pid_t child) {
  g_child = child;
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  struct sigaction forward {};
  forward.sa_handler = &forwardSignal;
  sigemptyset(&forward.sa_mask);
  forward.sa_flags = SA_RESTART;
  for (int signal_number : {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) {
    sigaction(signal_number, &forward, nullptr);
  }
}

Ending waitForTheProgram(pid_t child, int error_pipe) {
  Ending ending;
  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = read(error_pipe, &exec_error, sizeof(exec_error));
  } while (got < 0 && errno == EINTR);
  close(error_pipe);
  while (waitpid(child, &ending.status, 0) < 0 && errno == EINTR) {
  }
  g_child = -1;
  if (got == static_cast<ssize_t>(sizeof(exec_error))) ending.exec_error = exec_error;
  return ending;
}

std::string exitText(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

int exitLikeTheProgram(int status, bool fail_on_leak, bool any_leak) {
  if (WIFSIGNALED(status)) {
    // End the way the program ended, so a shell sees the same.
    int signal_number = WTERMSIG(status);
    signal(signal_number, SIG_DFL);
    kill(getpid(), signal_number);
    return 128 + signal_number;
  }
  int code = WEXITSTATUS(status);
  if (code == 0 && fail_on_leak && any_leak) return kExitLeak;
  return code;
}

}  // namespace memseal::cli
