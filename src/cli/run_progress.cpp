#include "cli/run_progress.h"

#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli/command_support.h"
#include "cli/run_processes.h"
#include "common/text.h"
#include "inject/run_protocol.h"

namespace memseal::cli {

namespace {

// "train.py:29": the innermost frame of the program's own code, its file without folders.
std::string ownLine(const LeakFinding& finding) {
  for (const StackFrame& frame : finding.site.frames) {
    if (frame.is_internal || frame.file.empty()) continue;
    std::string::size_type slash = frame.file.rfind('/');
    std::string file = slash == std::string::npos ? frame.file : frame.file.substr(slash + 1);
    return file + ":" + std::to_string(frame.line);
  }
  return "";
}

std::string verdictText(const LeakReport& report) {
  if (report.leak && !report.findings.empty()) {
    const LeakFinding& first = report.findings.front();
    std::string text = std::string("LEAK: ") + categoryId(first.category);
    std::string line = ownLine(first);
    if (!line.empty()) text += " at " + line;
    if (report.detected_at_step) text += " since step " + std::to_string(*report.detected_at_step);
    if (report.findings.size() > 1) {
      text += " (+" + std::to_string(report.findings.size() - 1) + " more)";
    }
    return text;
  }
  return report.steps <= report.warmup ? "warming up" : "no leak so far";
}

// The newest streamed report in the session folder, and how many processes are traced there.
struct Streamed {
  std::string path;
  std::size_t processes = 0;
};

Streamed newestStreamedReport(const std::string& session) {
  Streamed found;
  struct timespec newest {};
  DIR* dir = opendir(session.c_str());
  if (dir == nullptr) return found;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (endsWith(name, inject::kStatusSuffix)) ++found.processes;
    if (!endsWith(name, inject::kInterimReportSuffix)) continue;
    std::string path = session + "/" + name;
    struct stat info {};
    if (stat(path.c_str(), &info) != 0) continue;
    if (found.path.empty() || info.st_mtim.tv_sec > newest.tv_sec ||
        (info.st_mtim.tv_sec == newest.tv_sec && info.st_mtim.tv_nsec > newest.tv_nsec)) {
      newest = info.st_mtim;
      found.path = path;
    }
  }
  closedir(dir);
  return found;
}

bool terminalSize(int* rows, int* columns) {
  struct winsize size {};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) != 0) return false;
  *rows = size.ws_row;
  *columns = size.ws_col;
  return true;
}

void writeAll(const std::string& bytes) {
  // One write, so the program's own output, written to the same terminal, does not come between
  // moving to the last row and coming back.
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t wrote = write(STDERR_FILENO, bytes.data() + done, bytes.size() - done);
    if (wrote <= 0) return;
    done += static_cast<std::size_t>(wrote);
  }
}

}  // namespace

std::string progressText(const LeakReport& report, std::size_t processes, std::size_t width) {
  std::string text = "memseal: step " + std::to_string(report.steps);
  if (!report.per_step.empty() && report.phases.size() > 1) {
    std::uint32_t phase = report.per_step.back().phase;
    if (phase < report.phases.size() && !report.phases[phase].name.empty()) {
      text += " (" + report.phases[phase].name + ")";
    }
  }
  // The verdict first: on a narrow terminal the memory figures are cut, not the leak.
  text += " | " + verdictText(report);
  if (processes > 1) text += " | " + std::to_string(processes) + " processes";
  if (!report.per_step.empty()) {
    const StepSample& last = report.per_step.back();
    text += " | tensors " + common::bytesText(last.live_bytes);
    if (last.resident_bytes > 0) text += " | resident " + common::bytesText(last.resident_bytes);
  }
  for (const DeviceMemorySummary& device : report.devices) {
    text += " | " + device.device + " " +
            common::bytesText(static_cast<std::int64_t>(device.allocated)) + " allocated, " +
            common::bytesText(static_cast<std::int64_t>(device.reserved)) + " reserved";
  }
  if (text.size() > width) text = width > 3 ? text.substr(0, width - 3) + "..." : "";
  return text;
}

std::unique_ptr<ProgressLine> ProgressLine::startIfTerminal(const std::string& session, bool off) {
  if (off || !isatty(STDERR_FILENO)) return nullptr;
  const char* term = std::getenv("TERM");
  if (term == nullptr || *term == '\0' || std::strcmp(term, "dumb") == 0) return nullptr;
  int rows = 0;
  int columns = 0;
  if (!terminalSize(&rows, &columns) || rows < 3 || columns < 20) return nullptr;
  std::unique_ptr<ProgressLine> line(new ProgressLine(session));
  line->thread_ = std::thread([raw = line.get()] { raw->run(); });
  return line;
}

ProgressLine::ProgressLine(std::string session) : session_(std::move(session)) {}

ProgressLine::~ProgressLine() { stop(); }

void ProgressLine::run() {
  std::string last_path;
  struct timespec last_change {};
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    Streamed streamed = newestStreamedReport(session_);
    struct stat info {};
    bool changed = !streamed.path.empty() && stat(streamed.path.c_str(), &info) == 0 &&
                   (streamed.path != last_path || info.st_mtim.tv_sec != last_change.tv_sec ||
                    info.st_mtim.tv_nsec != last_change.tv_nsec);
    if (changed) {
      last_path = streamed.path;
      last_change = info.st_mtim;
      try {
        LeakReport report = LeakReport::fromJson(readFile(streamed.path));
        int rows = 0;
        int columns = 0;
        if (terminalSize(&rows, &columns) && rows >= 3 && columns >= 20) {
          lock.lock();
          if (!stopping_) {
            rows_ = rows;
            draw(progressText(report, streamed.processes, static_cast<std::size_t>(columns - 1)));
          }
          lock.unlock();
        }
      } catch (const std::exception&) {
        // A report of a newer schema, or one the program is still renaming into place: the next.
      }
    }
    lock.lock();
    wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; });
  }
}

void ProgressLine::draw(const std::string& text) {
  std::string bytes;
  if (!region_set_) {
    // Make room: a new line below the program's output, then the cursor back up to it, so the
    // program never writes on the row the line takes.
    bytes += "\n\033[1A";
    region_set_ = true;
  }
  // Save the cursor, scroll rows 1..N-1 only, write row N, restore the cursor (the region is set
  // again on every draw: the terminal may have been resized).
  bytes += "\0337\033[1;" + std::to_string(rows_ - 1) + "r\033[" + std::to_string(rows_) +
           ";1H\033[2K" + text + "\0338";
  writeAll(bytes);
}

void ProgressLine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (region_set_) {
    // The whole height back to the program's output, and the line cleared.
    writeAll("\0337\033[r\033[" + std::to_string(rows_) + ";1H\033[2K\0338");
  }
}

}  // namespace memseal::cli
