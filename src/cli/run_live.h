// `memseal run --live`: a page served by memseal itself while the program runs, the HTML report
// of what the program streamed so far (its report once a second; a distributed job's ranks
// merged), which updates itself in the browser and ends with the final report.
//
//   GET /                the page (memseal.check/1 of the program, or memseal.merged/1 of a job)
//   GET /page?after=V    the page once its version is newer than V (or after a few seconds with the
//                        same one; at once when the program has ended): the page's script asks this
//   GET /state.json      memseal.live/1: {version, ended, status, check | merged}
//
// Only requests whose Host names the loopback address are answered when the server listens on one
// (a web page elsewhere cannot reach it through a name it resolves to 127.0.0.1). The page's size
// is the streamed report's (its newest steps only), and the server keeps one page: its memory
// stays bounded over a day-long run.
#pragma once

#include <memory>
#include <string>

namespace memseal::cli {

// Where --live listens: "" (127.0.0.1, a free port), "PORT", "HOST:PORT" or "[IPv6]:PORT". False,
// with why in *error, for anything else.
struct LiveAddress {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
};
bool parseLiveAddress(const std::string& text, LiveAddress* address, std::string* error);

// Whether the word after --live is its address (a port, HOST:PORT) rather than the program's name
// (`memseal run --live python train.py`).
bool looksLikeALiveAddress(const std::string& word);

class LivePage {
 public:
  // Listens at `address` for the reports of `session` (memseal run's session folder), shown under
  // `title`; null, with why in *error, when it cannot listen there. Starts no thread: call
  // serve() once the program is forked.
  static std::unique_ptr<LivePage> listen(const LiveAddress& address, const std::string& session,
                                          const std::string& title, std::string* error);
  ~LivePage();  // stop()
  LivePage(const LivePage&) = delete;
  LivePage& operator=(const LivePage&) = delete;

  // "http://127.0.0.1:PORT/".
  const std::string& url() const { return url_; }
  // Answers requests, and reads the session folder once a second, from threads of its own.
  void serve();
  // The program has ended (`how`: "exit status 0"): its final reports are read once more, before
  // memseal removes its session folder, and the page says it is final.
  void programEnded(const std::string& how);
  // After the final report, on a terminal: keeps serving it until the user presses Enter or
  // Ctrl-C (or closes the terminal), saying so. Elsewhere (a script, CI) returns at once: memseal
  // ends with the program.
  void keepServingUntilTheUserIsDone() const;
  // Answers the requests waiting for a new page and stops listening.
  void stop();

 private:
  struct State;
  LivePage();
  std::unique_ptr<State> state_;
  std::string url_;
};

}  // namespace memseal::cli
