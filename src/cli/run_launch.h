// Starting the program under `memseal run`: what the command was asked (RunOptions), the
// environment the injected runtime reads, the fork and exec, the signals passed on while it runs,
// how it ended, and memseal's own exit like the program's.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "inject/run_protocol.h"

namespace memseal::cli {

struct RunOptions {
  std::vector<std::string> command;
  std::string output_path;
  OutputFlags output;
  std::string memory_viz_path;
  std::size_t memory_viz_events = 40000;
  std::optional<std::string> interval;
  std::optional<std::string> step_on;
  std::uint32_t warmup = 5;
  bool follow_fork = false;
  bool op_loops = false;       // Python programs too: steps from a loop found in the ops
  bool program_steps = false;  // the default, accepted as a flag for older command lines
  bool fail_on_leak = false;
  bool quiet = false;               // no progress line on the terminal while the program runs
  std::optional<std::string> live;  // --live [ADDRESS]: serve the report as a page while it runs
  std::string job_folder;           // a distributed job's reports; empty: defaultJobFolder
  // A job across machines: how long rank 0 waits at its end for the other nodes' reports.
  unsigned gather_seconds = inject::kDefaultGatherSeconds;
  TrackerFlags tracker;
};

// What the child needs to become the program with memseal injected.
struct Launch {
  std::string program;
  std::string libraries;  // where libmemseal_preload.so and libmemseal_run.so are
  std::string session;    // the folder the program's reports go to
  std::string step_rule;
  // SIGPIPE as memseal was started with: the live page's server ignores it in memseal, the
  // program gets it back as it would have had it.
  struct sigaction broken_pipe {};
};

// Forks the child that becomes the program: its pid, or -1 after saying why it cannot.
// `*exec_errors`: the pipe's end through which the child says why exec failed (nothing arrives on
// success).
pid_t forkTheProgram(const RunOptions& options, const Launch& launch, int* exec_errors);

// Ctrl-C and Ctrl-\ reach the program from the terminal (same process group): memseal waits for
// it to act on them. What is sent to memseal alone is passed on.
void forwardSignalsTo(pid_t child);

// How the program ended: its wait status, or the errno of an exec that failed.
struct Ending {
  int status = 0;
  std::optional<int> exec_error;
};
Ending waitForTheProgram(pid_t child, int error_pipe);

// "exit status N" or "killed by signal N (NAME)".
std::string exitText(int status);

// memseal's exit: the program's own (a signal that ended it ends memseal the same way), 1 instead
// of 0 with --fail-on-leak when a leak was reported.
int exitLikeTheProgram(int status, bool fail_on_leak, bool any_leak);

}  // namespace memseal::cli
