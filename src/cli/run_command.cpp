// `memseal run [options] -- PROGRAM ARGS...`: starts an unmodified program with memseal injected
// (LD_PRELOAD of the shim in src/inject/), passes its stdin, stdout, stderr and exit status
// through, and when it has ended prints the leak report of the program (and of each child, with
// --follow-fork) and writes --json/--html. Exit: the program's own status (a signal that ended it
// ends memseal the same way); 1 instead of 0 with --fail-on-leak when a leak was reported; 2 when
// the program cannot be started under memseal.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/command_list.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/run_job.h"
#include "cli/run_launch.h"
#include "cli/run_live.h"
#include "cli/run_processes.h"
#include "cli/run_progress.h"
#include "cli/run_target.h"
#include "inject/run_protocol.h"
#include "inject/step_rule.h"
#include "memseal/leak_detector.h"

namespace memseal::cli {

namespace {

void fail(const std::string& message) { std::cerr << "memseal run: " << message << "\n"; }

std::string makeSessionDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/memseal-run-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) return "";
  return buffer.data();
}

void removeSessionDirectory(const std::string& folder) {
  if (DIR* dir = opendir(folder.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") unlink((folder + "/" + name).c_str());
    }
    closedir(dir);
  }
  rmdir(folder.c_str());
}

// report.json -> report.PID.json, for a child's copy of --json/--html.
std::string childPath(const std::string& path, long pid) {
  std::size_t slash = path.rfind('/');
  std::size_t dot = path.rfind('.');
  std::string tag = "." + std::to_string(pid);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

std::vector<std::string> g_program_after_dashes;

// The step rule the program's runtime reads (auto, interval:NS or on:NAME), or nothing after
// saying what is wrong with --interval / --step-on.
std::optional<std::string> stepRule(const RunOptions& options) {
  std::string error;
  std::optional<std::string> rule =
      inject::stepRuleFromFlags(options.interval, options.step_on, &error);
  if (!rule) fail(error);
  return rule;
}

// The tracker's flags and the environment's MEMSEAL_* read as the program will read them, and the
// output paths writable: false after saying what is wrong.
bool optionsHold(const RunOptions& options) {
  TrackerOptions tracker;
  try {
    options.tracker.applyTo(tracker);
    TrackerOptions::fromEnvironment();
  } catch (const std::exception& error) {
    fail(error.what());
    return false;
  }
  if (!options.memory_viz_path.empty() && options.memory_viz_events == 0) {
    fail("--memory-viz-events must be at least 1");
    return false;
  }
  if (!options.job_folder.empty() && holdsReports(options.job_folder)) {
    fail("--job-dir " + options.job_folder +
         " holds another run's reports already: give an empty or new folder");
    return false;
  }
  return checkOutputPath("run", "--output", options.output_path) && options.output.check("run") &&
         checkOutputPath("run", "--memory-viz", options.memory_viz_path);
}

// --memory-viz: the trace the process wrote beside its report, to `path`; a line in `text` says
// where it went, or that the process wrote none (killed before its exit handlers ran). False
// only when `path` cannot be written.
bool copyMemoryViz(const std::string& session, long pid, const std::string& path,
                   std::ostringstream& text) {
  std::string pickle = readFile(session + "/" + std::to_string(pid) + inject::kMemoryVizSuffix);
  if (pickle.empty()) {
    text << "memseal run: pid " << pid << " wrote no memory_viz trace (it ended before its exit "
         << "handlers ran)\n";
    return true;
  }
  if (!writeOutput("run", path, pickle)) return false;
  text << "memseal run: memory_viz trace of pid " << pid << " -> " << path
       << " (python -m torch.cuda._memory_viz trace_plot " << path
       << ", or pytorch.org/memory_viz)\n";
  return true;
}

// A process's --json, --memory-viz and --html (a child's as PATH.PID; in a distributed job, the
// paths are the merged report's). False when one could not be written.
bool writeProcessOutputs(const RunOptions& options, const std::string& session,
                         const TracedProcess& process, bool own_paths, const LeakReport& report,
                         const ProcessReportFile& file, std::ostringstream& text) {
  bool root = process.kind == "root";
  bool outputs_ok = true;
  const OutputFlags& output = options.output;
  std::string json_path = own_paths || output.json_path.empty()
                              ? output.json_path
                              : childPath(output.json_path, process.pid);
  std::string html_path = own_paths || output.html_path.empty()
                              ? output.html_path
                              : childPath(output.html_path, process.pid);
  // The runtime's own JSON as it wrote it, unless memseal added to it (an interim report's note).
  if (!json_path.empty()) {
    const std::string& json = file.interim_age.empty() ? file.json : report.toJson();
    outputs_ok = writeOutput("run", json_path, json) && outputs_ok;
  }
  if (!options.memory_viz_path.empty() && process.kind != "fork") {
    outputs_ok = copyMemoryViz(session, process.pid,
                               root ? options.memory_viz_path
                                    : childPath(options.memory_viz_path, process.pid),
                               text) &&
                 outputs_ok;
  }
  if (!html_path.empty()) {
    const std::string& name = options.command.front();
    std::string title = root ? name : name + " child " + std::to_string(process.pid);
    outputs_ok =
        writeHtmlIfAsked("run", html_path, title, HtmlPage{"", &report, nullptr, nullptr, ""}) &&
        outputs_ok;
  }
  return outputs_ok;
}

// The report of each traced process (the program, then its children) into `text`, and its
// outputs. False when an output could not be written.
bool reportEachProcess(const RunOptions& options, const std::string& session, int status,
                       std::ostringstream& text, bool* any_leak) {
  const std::string& name = options.command.front();
  bool outputs_ok = true;
  bool root_seen = false;
  std::vector<TracedProcess> processes = tracedProcesses(session);
  std::vector<RankProcess> ranks = rankProcesses(processes, session);
  std::vector<TracedProcess> without_report;
  std::vector<QuietChild> quiet_children;  // children whose report found no leak
  for (const TracedProcess& process : processes) {
    bool root = process.kind == "root";
    root_seen = root_seen || root;
    if (root) {
      text << "memseal run: " << name << " (pid " << process.pid << "), " << exitText(status)
           << "\n";
    }
    if (process.rank && process.kind != "fork") continue;  // in the job's merged report
    ProcessReportFile file = readProcessReport(session, process.pid);
    outputs_ok = outputs_ok && !file.folder_full;  // a report that could not be delivered
    if (!root && file.json.empty() && !file.folder_full) {
      without_report.push_back(process);
      continue;
    }
    std::ostringstream own;  // a child's, said in full when it leaks or its siblings are few
    if (!root) own << childHeading(process);
    std::optional<LeakReport> read = processReport(process.pid, file, own);
    if (read && root && !ranks.empty() && read->steps == 0 && !read->leak) {
      own << "memseal run: the job's launcher; it ran no steps of its own\n";
      read.reset();
    }
    bool written = true;
    if (read) {
      *any_leak = *any_leak || read->leak;
      own << read->toText();
      written =
          writeProcessOutputs(options, session, process, root && ranks.empty(), *read, file, own);
      outputs_ok = outputs_ok && written;
    }
    if (!root && read && !read->leak && written && file.interim_age.empty()) {
      quiet_children.push_back({process, own.str()});
    } else {
      text << own.str();
    }
  }
  sayQuietChildren(quiet_children, text);
  sayChildrenWithoutReport(without_report, text);
  if (!root_seen && folderIsFull(session)) {
    text << "memseal run: " << name << " (" << exitText(status)
         << "): nothing could be read back from it: the folder for its reports (" << session
         << ") has no space left; it said on stderr what it could not write\n";
    outputs_ok = false;
  } else if (!root_seen) {
    text << "memseal run: " << name << " never loaded libtorch: nothing was tracked in it ("
         << exitText(status) << ")\n";
  }
  if (!ranks.empty()) {
    text << "\n";
    std::string folder = options.job_folder.empty() ? defaultJobFolder(ranks) : options.job_folder;
    outputs_ok = reportJob(ranks, folder, options.output, text, any_leak) && outputs_ok;
  }
  return outputs_ok;
}

// --live: the page, listening before the program is forked (no thread runs in memseal until
// then), or null after saying why it cannot listen (`*failed`).
std::unique_ptr<LivePage> listenForTheLivePage(const RunOptions& options,
                                               const std::string& session, bool* failed) {
  *failed = false;
  if (!options.live) return nullptr;
  LiveAddress address;
  std::string error;
  std::unique_ptr<LivePage> live;
  if (parseLiveAddress(*options.live, &address, &error)) {
    live = LivePage::listen(address, session, options.command.front(), &error);
  }
  if (!live) {
    fail(error);
    *failed = true;
  }
  return live;
}

int runProgram(const RunOptions& options) {
  if (options.command.empty()) {
    fail("no program given: memseal run [options] -- PROGRAM [ARGS...]");
    return kExitUsage;
  }
  Launch launch;
  std::optional<std::string> step_rule = stepRule(options);
  if (!step_rule || !optionsHold(options)) return kExitUsage;
  launch.step_rule = *step_rule;
  launch.program = traceableProgram(options.command.front());
  if (launch.program.empty()) return kExitUsage;
  launch.libraries = injectLibraryDirectory();
  if (launch.libraries.empty()) {
    fail(
        "cannot find libmemseal_preload.so and libmemseal_run.so next to this memseal (or in "
        "MEMSEAL_RUN_LIBDIR)");
    return kExitUsage;
  }
  launch.session = makeSessionDirectory();
  if (launch.session.empty()) {
    fail(std::string("cannot make a folder for the reports: ") + std::strerror(errno));
    return kExitUsage;
  }

  sigaction(SIGPIPE, nullptr, &launch.broken_pipe);
  bool live_failed = false;
  std::unique_ptr<LivePage> live = listenForTheLivePage(options, launch.session, &live_failed);
  if (live_failed) {
    removeSessionDirectory(launch.session);
    return kExitUsage;
  }

  int exec_errors = -1;
  pid_t child = forkTheProgram(options, launch, &exec_errors);
  if (child < 0) {
    removeSessionDirectory(launch.session);
    return kExitUsage;
  }
  forwardSignalsTo(child);
  if (live) {
    live->serve();
    std::cerr << "memseal run: live page at " << live->url() << "\n" << std::flush;
  }
  std::unique_ptr<ProgressLine> progress =
      ProgressLine::startIfTerminal(launch.session, options.quiet);
  Ending ending = waitForTheProgram(child, exec_errors);
  if (progress) progress->stop();
  if (live && !ending.exec_error) live->programEnded(exitText(ending.status));
  if (ending.exec_error) {
    removeSessionDirectory(launch.session);
    fail("cannot start " + launch.program + ": " + std::strerror(*ending.exec_error));
    return kExitUsage;
  }

  std::ostringstream text;
  bool any_leak = false;
  bool outputs_ok = reportEachProcess(options, launch.session, ending.status, text, &any_leak);
  removeSessionDirectory(launch.session);
  if (options.output_path.empty()) {
    std::cerr << text.str() << std::flush;
  } else if (!writeOutput("run", options.output_path, text.str())) {
    outputs_ok = false;
  }
  if (live) {
    live->keepServingUntilTheUserIsDone();
    live->stop();
  }
  if (!outputs_ok) return kExitUsage;
  return exitLikeTheProgram(ending.status, options.fail_on_leak, any_leak);
}

}  // namespace

int setAsideRunProgram(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "run") != 0) return argc;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      g_program_after_dashes.assign(argv + i + 1, argv + argc);
      return i;
    }
  }
  return argc;
}

void addRunCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand(
      "run",
      "Run an unmodified program (a libtorch binary, or python script.py) under the leak detector "
      "and report when it ends (exit: the program's own; 2 when it cannot be started)");
  // Without "--", everything from the program's name on is the program's, flags included.
  command->prefix_command();
  command->footer("Usage: memseal run [OPTIONS] [--] PROGRAM [ARGS...]");
  command->add_option("--output", options->output_path,
                      "Write the text report here instead of stderr");
  options->output.addTo(
      command, "Write the program's report as JSON (memseal.check/1); a child's gets .PID");
  command->add_option("--memory-viz", options->memory_viz_path,
                      "Also write the program's allocations as PyTorch's memory snapshot "
                      "(torch.cuda._memory_viz, pytorch.org/memory_viz); a child's gets .PID");
  command->add_option("--memory-viz-events", options->memory_viz_events,
                      "Allocation events the memory_viz trace keeps, the newest (default 40000)");
  command->add_option("--interval", options->interval,
                      "Steps are time windows of this length (250ms, 2s, 1m) instead of the loop "
                      "memseal finds itself; a window in which the program allocated and freed "
                      "nothing is no step");
  command->add_option("--step-on", options->step_on,
                      "A step ends at each outermost call of this op (aten::linear or linear), "
                      "TorchScript function (forward) or named region (RECORD_USER_SCOPE, "
                      "record_function), or at each MEMSEAL_REGION of this name");
  command->add_option("--warmup", options->warmup, "Warm-up steps never blamed (default 5)");
  command->add_option("--job-dir", options->job_folder,
                      "A distributed job's reports (each rank's and the merged one) go here "
                      "(default: memseal-RUN_ID, or memseal-job-PID, in the current folder)");
  command
      ->add_option("--gather-timeout", options->gather_seconds,
                   "A job across machines (torchrun --nnodes N, memseal run on each node): how "
                   "many seconds rank 0 waits at its end for the other nodes' reports, which the "
                   "memseal of its node merges with its own (default 60)")
      ->check(CLI::Range(0u, 86400u));
  command->add_flag("--op-loops", options->op_loops,
                    "Python programs: a step is an iteration of a loop found in the program's ops, "
                    "as in a C++ program, instead of the program's own step (an optimizer's "
                    "step, a DataLoader's batch, the outermost module's call, seen through "
                    "PyTorch's hooks)");
  // The program's own steps were once asked for with this flag; they are the default now.
  command->add_flag("--program-steps", options->program_steps)->group("");
  command->add_flag("--follow-fork", options->follow_fork,
                    "Trace the program's children too (forked and exec'd); each gets a report");
  command->add_flag("--fail-on-leak", options->fail_on_leak,
                    "Exit 1 instead of 0 when a leak is reported");
  command->add_flag("--quiet", options->quiet,
                    "No progress line at the bottom of the terminal while the program runs (there "
                    "is none when stderr is a pipe or a file)");
  command
      ->add_option("--live", options->live,
                   "Serve the report as a page that updates itself while the program runs, at "
                   "this PORT or HOST:PORT (default: 127.0.0.1 and a free port; the URL is "
                   "printed); on a terminal, the final report stays there until Enter or Ctrl-C")
      ->expected(0, 1)
      ->default_str("");
  options->tracker.addTo(command, "all");
  entries.push_back({command, [options, command] {
                       options->command = command->remaining();
                       options->command.insert(options->command.end(),
                                               g_program_after_dashes.begin(),
                                               g_program_after_dashes.end());
                       // `--live python train.py`: the word after --live is the program's name,
                       // not an address (which has a port: digits, or HOST:PORT).
                       if (options->live && !looksLikeALiveAddress(*options->live)) {
                         options->command.insert(options->command.begin(), *options->live);
                         options->live = "";
                       }
                       return runProgram(*options);
                     }});
}

}  // namespace memseal::cli
