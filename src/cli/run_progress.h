// The line `memseal run` keeps up to date at the bottom of a terminal while the program runs: its
// step, phase, tensor and resident memory, CUDA memory, and whether a leak has been seen so far,
// read from the report the program streams (PID.interim.json, at most once a second). Only on a
// terminal: nothing of it goes into a pipe or a file, and the final report is printed below it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "memseal/leak_detector.h"

namespace memseal::cli {

// The line for a streamed report of one of `processes` traced processes (more than one: a job's
// ranks, children), at most `width` characters. Pure.
std::string progressText(const LeakReport& report, std::size_t processes, std::size_t width);

// Draws progressText on the terminal's last row, kept out of the program's scrolling output (the
// terminal's scroll region, as apt's progress bar does), once a second from its own thread.
class ProgressLine {
 public:
  // A progress line for the reports in `session`, or null when stderr is no terminal (a pipe, a
  // file), the terminal cannot keep a line apart (TERM unset or dumb, fewer than 3 rows), or
  // `off` (--quiet).
  static std::unique_ptr<ProgressLine> startIfTerminal(const std::string& session, bool off);
  ~ProgressLine();  // stop()
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Ends the updates and gives the terminal its whole height back, the line cleared.
  void stop();

 private:
  explicit ProgressLine(std::string session);
  void run();
  void draw(const std::string& text);

  std::string session_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool region_set_ = false;  // the scroll region leaves the last row to the line
  int rows_ = 0;
  std::thread thread_;
};

}  // namespace memseal::cli
