// What the commands that run a case share: tracker flags in the one option grammar, output paths
// checked before anything runs, and files written whole or not at all.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "memseal/explain.h"
#include "memseal/tracker.h"

namespace memseal::cli {

// Whether `text` ends with `suffix` (a file name with its extension, a path with its slash).
inline bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tracker's flags (--stacks, --watch-ops, --tensor-metadata) as the user spelled them; an
// unset one comes from the environment, then from the command's defaults. Registered and applied
// here for every command that tracks.
struct TrackerFlags {
  std::optional<std::string> stacks;
  std::optional<std::string> watch_ops;
  std::optional<std::string> tensor_metadata;

  // `watch_ops_default` is --watch-ops' default in words for its help; nullptr: the command
  // has no --watch-ops.
  void addTo(CLI::App* command, const char* watch_ops_default);
  // TrackerOptions::set's grammar; a bad value is a CLI::ValidationError naming the flag and what
  // it accepts.
  void applyTo(TrackerOptions& tracker) const;
};

// The report files a command writes: --json (its schema named in the help) and --html, registered
// and checked here for every command that writes them.
struct OutputFlags {
  std::string json_path;
  std::string html_path;

  // `json_help`: what the JSON holds ("Write the report as JSON (memseal.check/1)").
  void addTo(CLI::App* command, const std::string& json_help);
  // False with a message on stderr when either path cannot be written (see checkOutputPath):
  // before anything runs.
  bool check(const char* command) const;
};

// False with a message on stderr ("memseal COMMAND: FLAG PATH is a directory" / "... no folder
// ...") when `path` cannot be written; true for an empty path (flag not given).
bool checkOutputPath(const char* command, const char* flag, const std::string& path);

// Writes the file whole (beside it, then renamed); false with a message on stderr.
bool writeOutput(const char* command, const std::string& path, const std::string& content);

// When --html was given (`path` not empty): the page titled by the case's file name, with the
// reports given. False with a message on stderr when it cannot be written.
bool writeHtmlIfAsked(const char* command, const std::string& path, const std::string& case_path,
                      HtmlPage page);

}  // namespace memseal::cli
