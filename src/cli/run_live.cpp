#include "cli/run_live.h"

#include <httplib.h>
#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_job.h"
#include "cli/run_processes.h"
#include "common/schemas.h"
#include "common/text.h"
#include "memseal/html.h"
#include "memseal/merged_report.h"

namespace memseal::cli {

namespace {

// How long a request for a newer page waits for one before it is answered with the same page (the
// script asks again): short enough that a page whose server is gone says so soon.
constexpr auto kLongestWait = std::chrono::seconds(10);
// How often the session folder is read: the program streams its report at most once a second.
constexpr auto kRefreshEvery = std::chrono::seconds(1);

bool isLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The host part of a Host header: "127.0.0.1:8000" -> "127.0.0.1", "[::1]:8000" -> "::1".
std::string hostOf(const std::string& header) {
  if (!header.empty() && header.front() == '[') {
    std::size_t close = header.find(']');
    return close == std::string::npos ? header : header.substr(1, close - 1);
  }
  return header.substr(0, header.find(':'));
}

std::string durationText(std::chrono::steady_clock::duration elapsed) {
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(elapsed).count();
  if (seconds < 60) return std::to_string(seconds) + " s";
  if (seconds < 3600) {
    return std::to_string(seconds / 60) + " min " + std::to_string(seconds % 60) + " s";
  }
  return std::to_string(seconds / 3600) + " h " + std::to_string(seconds / 60 % 60) + " min";
}

// A page's version from /page?after=: digits that fit, "" as 0.
std::optional<std::uint64_t> versionOf(const std::string& text) {
  if (text.empty()) return 0;
  if (text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(text);
}

}  // namespace

bool looksLikeALiveAddress(const std::string& word) {
  return word.empty() || word.find(':') != std::string::npos ||
         word.find_first_not_of("0123456789") == std::string::npos;
}

bool parseLiveAddress(const std::string& text, LiveAddress* address, std::string* error) {
  LiveAddress parsed;
  std::string port = text;
  if (!text.empty() && text.front() == '[') {
    std::size_t close = text.find("]:");
    if (close == std::string::npos) {
      *error = "--live " + text + ": an IPv6 address is written [ADDRESS]:PORT";
      return false;
    }
    parsed.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else if (std::size_t colon = text.rfind(':'); colon != std::string::npos) {
    parsed.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (parsed.host.empty() || parsed.host.find(':') != std::string::npos) {
      *error = "--live " + text + ": give PORT, HOST:PORT or [IPv6]:PORT";
      return false;
    }
  }
  if (!port.empty()) {
    char* end = nullptr;
    long number = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || port.front() == '-' || port.front() == '+' || number > 65535) {
      *error = "--live " + text + ": the port must be a number from 0 (any free port) to 65535";
      return false;
    }
    parsed.port = static_cast<int>(number);
  }
  *address = parsed;
  return true;
}

struct LivePage::State {
  std::string session;
  std::string title;
  bool loopback_only = true;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  httplib::Server server;
  std::thread listener;
  std::thread refresher;

  std::mutex mutex;
  std::condition_variable changed;  // a new page, the program's end, or stopping
  bool ended = false;
  bool stopping = false;
  std::uint64_t version = 0;
  std::string shown;  // what the page was made from: a new page only when this changes
  std::string page;   // the page of `version`
  std::string state_json;

  void refreshEverySecond();
  void refresh(const std::string* how_it_ended);
  std::string pageAfter(std::uint64_t after);
  void route();
};

void LivePage::State::refresh(const std::string* how_it_ended) {
  std::vector<TracedProcess> processes = tracedProcesses(session);
  std::vector<RankProcess> ranks = rankProcesses(processes, session);
  HtmlPage page_inputs;
  page_inputs.title = title;
  std::optional<MergedReport> merged;
  std::string document;
  std::string status;
  if (!ranks.empty()) {
    // While the job runs, a rank's streamed report is its latest, not a last word.
    if (how_it_ended == nullptr) {
      for (RankProcess& rank : ranks) rank.interim_age.clear();
    }
    std::vector<RankReport> reports = readRankReports(ranks);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (how_it_ended == nullptr && ranks[i].report_json.empty()) {
        reports[i].missing_reason = "no report streamed yet";
      }
    }
    merged = mergeRankReports(reports);
    document = merged->toJson();
    page_inputs.merged = &*merged;
    page_inputs.title = title + " (job of " + std::to_string(ranks.size()) + " ranks)";
  } else if (!processes.empty() && processes.front().kind == "root") {
    document = readProcessReport(session, processes.front().pid).json;
    page_inputs.check_json = document;
  }
  if (how_it_ended != nullptr) {
    status = "The program ended (" + *how_it_ended + ") after " +
             durationText(std::chrono::steady_clock::now() - started) + ": its final report.";
  } else {
    status = "Running for " + durationText(std::chrono::steady_clock::now() - started) +
             (document.empty() ? ": no report yet (the program streams one once a second once it "
                                 "has loaded libtorch and taken a step)."
                               : ": the report so far, updated as the program streams it.");
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (ended) return;  // the final page stays
  std::string key = status + '\n' + document;
  if (key == shown && !page.empty()) return;
  LivePageState live{version + 1, how_it_ended != nullptr, status};
  page_inputs.live = &live;
  std::string rendered;
  try {
    rendered = renderHtml(page_inputs);
  } catch (const std::exception& error) {
    // A report that cannot be read as JSON (a file cut short): the page says so and shows nothing.
    live.status += " Its latest report could not be read: " + std::string(error.what());
    page_inputs.check_json.clear();
    page_inputs.merged = nullptr;
    rendered = renderHtml(page_inputs);
    document.clear();
  }
  // The document as the program (or the merge) wrote it: renderHtml has read it as JSON.
  std::string state = "{\"schema\":\"" + common::kLiveSchema.tag() +
                      "\",\"version\":" + std::to_string(live.version) +
                      ",\"ended\":" + (live.ended ? "true" : "false") +
                      ",\"status\":" + nlohmann::json(live.status).dump();
  if (!document.empty())
    state += std::string(",\"") + (merged ? "merged" : "check") + "\":" + document;
  version = live.version;
  shown = std::move(key);
  page = std::move(rendered);
  state_json = state + "}";
  ended = live.ended;
  changed.notify_all();
}

void LivePage::State::refreshEverySecond() {
  std::unique_lock<std::mutex> lock(mutex);
  while (!stopping && !ended) {
    lock.unlock();
    refresh(nullptr);
    lock.lock();
    changed.wait_for(lock, kRefreshEvery, [this] { return stopping || ended; });
  }
}

std::string LivePage::State::pageAfter(std::uint64_t after) {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait_for(lock, kLongestWait, [&] { return version > after || ended || stopping; });
  return page;
}

void LivePage::State::route() {
  // Only GET, only small requests; a client that stops sending is dropped after a few seconds.
  server.set_payload_max_length(1024);
  server.set_read_timeout(5);
  server.set_write_timeout(5);
  server.set_keep_alive_timeout(1);
  server.set_pre_routing_handler(
      [this](const httplib::Request& request, httplib::Response& response) {
        if (loopback_only && !isLoopback(hostOf(request.get_header_value("Host")))) {
          response.status = 403;
          response.set_content(
              "memseal's live page answers only requests to its loopback address (127.0.0.1, "
              "localhost)\n",
              "text/plain");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  auto no_store = [](httplib::Response& response) {
    response.set_header("Cache-Control", "no-store");
  };
  server.Get("/", [this, no_store](const httplib::Request&, httplib::Response& response) {
    no_store(response);
    std::lock_guard<std::mutex> lock(mutex);
    response.set_content(page, "text/html; charset=utf-8");
  });
  server.Get(
      "/page", [this, no_store](const httplib::Request& request, httplib::Response& response) {
        no_store(response);
        std::optional<std::uint64_t> after = versionOf(request.get_param_value("after"));
        if (!after) {
          response.status = 400;
          response.set_content("memseal's live page: after= takes the version of a page (digits)\n",
                               "text/plain");
          return;
        }
        response.set_content(pageAfter(*after), "text/html; charset=utf-8");
      });
  server.Get("/state.json", [this, no_store](const httplib::Request&, httplib::Response& response) {
    no_store(response);
    std::lock_guard<std::mutex> lock(mutex);
    response.set_content(state_json, "application/json");
  });
  server.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    response.set_content("memseal's live page: " + std::to_string(response.status) +
                             " (the page is at /, its state at /state.json)\n",
                         "text/plain");
  });
}

LivePage::LivePage() : state_(std::make_unique<State>()) {}

std::unique_ptr<LivePage> LivePage::listen(const LiveAddress& address, const std::string& session,
                                           const std::string& title, std::string* error) {
  std::unique_ptr<LivePage> live(new LivePage());
  State& state = *live->state_;
  state.session = session;
  state.title = title;
  state.loopback_only = isLoopback(address.host);
  // Few threads: a browser tab holds one request at a time, waiting for the next page.
  state.server.new_task_queue = [] { return new httplib::ThreadPool(4, 16); };
  state.route();
  int port = address.port;
  if (port == 0) {
    port = state.server.bind_to_any_port(address.host);
  } else if (!state.server.bind_to_port(address.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    *error = "--live: cannot listen on " + address.host + ":" + std::to_string(address.port) +
             " (in use, or not an address of this machine)";
    return nullptr;
  }
  state.refresh(nullptr);
  std::string shown_host =
      address.host.find(':') != std::string::npos ? "[" + address.host + "]" : address.host;
  live->url_ = "http://" + shown_host + ":" + std::to_string(port) + "/";
  return live;
}

void LivePage::serve() {
  State& state = *state_;
  // The server's threads (and the pool's, which they start) take no signal: memseal's main thread
  // forwards them to the program, and after the program has ended waits for Ctrl-C, which a
  // thread that did not block it would take (and drop: memseal ignores SIGINT itself).
  sigset_t every_signal;
  sigset_t before;
  sigfillset(&every_signal);
  pthread_sigmask(SIG_BLOCK, &every_signal, &before);
  state.listener = std::thread([&state] { state.server.listen_after_bind(); });
  state.refresher = std::thread([&state] { state.refreshEverySecond(); });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

void LivePage::programEnded(const std::string& how) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->stopping) return;
  }
  state_->refresh(&how);
  if (state_->refresher.joinable()) state_->refresher.join();
}

void LivePage::stop() {
  State& state = *state_;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.stopping = true;
  }
  state.changed.notify_all();
  state.server.stop();
  if (state.listener.joinable()) state.listener.join();
  if (state.refresher.joinable()) state.refresher.join();
}

void LivePage::keepServingUntilTheUserIsDone() const {
  if (!isatty(STDIN_FILENO)) return;
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
    sigaddset(&stop_signals, signal_number);
  sigset_t before;
  // Blocked before the user is told: a Ctrl-C right after the line is taken, not lost.
  pthread_sigmask(SIG_BLOCK, &stop_signals, &before);
  std::cerr << "memseal run: the live page keeps the final report at " << url_
            << ": press Enter or Ctrl-C to stop serving it\n"
            << std::flush;
  int signals = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  pollfd waiting[2] = {{STDIN_FILENO, POLLIN, 0}, {signals, POLLIN, 0}};
  while (poll(waiting, signals >= 0 ? 2 : 1, -1) < 0 && errno == EINTR) {
  }
  if (signals >= 0) {
    // The signal was the user's way of saying "done": taken here, so that it does not end memseal
    // (with another exit status than the program's) once unblocked.
    signalfd_siginfo taken{};
    while ((waiting[1].revents & POLLIN) != 0 && read(signals, &taken, sizeof(taken)) < 0 &&
           errno == EINTR) {
    }
    close(signals);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

LivePage::~LivePage() { stop(); }

}  // namespace memseal::cli
