// `memseal diff BEFORE.json AFTER.json`: two reports of one program side by side (check, explain,
// fit or merged): the peak's change by role, module, line and op, adding up to the whole change;
// leak causes new, gone or changed; the largest size before and after. Exit codes as diff(1): 0 no
// change beyond the noise, 1 a change, 2 reports it cannot read or compare (of two kinds, of two
// programs without --force).
#include <iostream>
#include <memory>

#include "cli/baseline_flags.h"
#include "cli/command_list.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "memseal/diff.h"
#include "memseal/html.h"

namespace memseal::cli {

namespace {

struct DiffCommandOptions {
  std::string before_path;
  std::string after_path;
  bool force = false;
  OutputFlags output;
};

int runDiff(const DiffCommandOptions& options) {
  if (!options.output.check("diff")) return kExitUsage;
  std::string before, after;
  for (const auto& [path, content] :
       {std::pair{&options.before_path, &before}, std::pair{&options.after_path, &after}}) {
    if (!readTextFile(*path, content)) {
      std::cerr << "memseal diff: cannot read " << *path << "\n";
      return kExitUsage;
    }
  }
  ReportDiff diff;
  try {
    DiffOptions diff_options;
    diff_options.before_label = options.before_path;
    diff_options.after_label = options.after_path;
    diff_options.force = options.force;
    diff = diffReports(before, after, diff_options);
  } catch (const std::invalid_argument& error) {
    std::cerr << "memseal diff: " << error.what() << "\n";
    return kExitUsage;
  }
  std::cout << diff.toText();
  bool written = options.output.json_path.empty() ||
                 writeOutput("diff", options.output.json_path, diff.toJson());
  HtmlPage page;
  page.diff = &diff;
  written = writeHtmlIfAsked("diff", options.output.html_path,
                             options.before_path + " vs " + options.after_path, page) &&
            written;
  if (!written) return kExitUsage;
  return diff.empty() ? kExitOk : kExitLeak;
}

}  // namespace

void addDiffCommand(CLI::App& app, std::vector<CommandEntry>& entries) {
  auto options = std::make_shared<DiffCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "diff",
      "Compare two reports of one program (check, explain, fit, run or merged): what moved the "
      "peak, leak causes new or gone, capacity (exit 0: no change, 1: a change, 2: error)");
  command->add_option("before", options->before_path, "The older report (JSON)")->required();
  command->add_option("after", options->after_path, "The newer report (JSON)")->required();
  command->add_flag("--force", options->force,
                    "Compare reports that name no source file in common (two programs?) anyway");
  options->output.addTo(command, "Write the comparison as JSON (memseal.diff/1)");
  entries.push_back({command, [options] { return runDiff(*options); }});
}

}  // namespace memseal::cli
