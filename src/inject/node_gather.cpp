#include "inject/node_gather.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/schemas.h"
#include "common/text.h"
#include "inject/run_protocol.h"

namespace memseal::inject {

namespace {

// A report goes in parts: the store's libuv server refuses a value over a few MiB, and a long
// run's report (its per-step samples) can be larger.
constexpr std::size_t kPartBytes = std::size_t{1} << 20;
// How long a rank of another node tries to reach the store at its exit before giving up.
constexpr std::chrono::seconds kSendTimeout{15};
// How long a rank of another node tries to say, as memseal starts in it, that it is traced.
constexpr std::chrono::seconds kAnnounceTimeout{5};

std::optional<long> environmentNumber(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0) return std::nullopt;
  return value;
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// c10d's messages can run to a stack trace: the first line says what happened.
std::string firstLineOf(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string rankKey(const JobStore& store, int rank) {
  return store.key_prefix + "rank/" + std::to_string(rank);
}

// Set by each rank of another node as memseal starts in it: rank 0 waits for their reports only.
std::string tracedKey(const JobStore& store, int rank) {
  return store.key_prefix + "traced/" + std::to_string(rank);
}

std::vector<std::uint8_t> bytesOf(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

std::unique_ptr<c10d::TCPStore> connect(const JobStore& store, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = store.port;
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  return std::make_unique<c10d::TCPStore>(store.host, options);
}

// The head of a rank-R.gathered file (run_protocol.h), up to its empty line.
std::string gatheredHead(const RankIdentity& rank, const std::string& more) {
  return common::kGatheredSchema.tag() + "\nrank=" + std::to_string(rank.rank) +
         "\nworld_size=" + std::to_string(rank.world_size) + "\nrun_id=" + rank.run_id +
         "\nnodes=" + std::to_string(rank.nodes) + "\n" + more + "\n";
}

// What the store holds of one rank of another node; throws where it holds nothing (yet).
std::string readRank(c10d::TCPStore& client, const std::string& key) {
  std::vector<std::uint8_t> count = client.get(key);
  long parts = std::strtol(std::string(count.begin(), count.end()).c_str(), nullptr, 10);
  std::string text;
  for (long part = 0; part < parts; ++part) {
    std::vector<std::uint8_t> bytes = client.get(key + "/part/" + std::to_string(part));
    text.append(bytes.begin(), bytes.end());
  }
  return text;
}

}  // namespace

std::optional<JobStore> jobStoreOf(const RankIdentity& rank) {
  // The store must be the agents' (see the header); torchrun says so in the workers' environment.
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (rank.nodes < 2 || agent_store == nullptr || std::strcmp(agent_store, "True") != 0) {
    return std::nullopt;
  }
  const char* host = std::getenv("MASTER_ADDR");
  std::optional<long> port = environmentNumber("MASTER_PORT");
  std::optional<long> local_world_size = environmentNumber("LOCAL_WORLD_SIZE");
  if (host == nullptr || *host == '\0' || !port || *port < 1 || *port > 65535 ||
      !local_world_size || *local_world_size < 1) {
    return std::nullopt;
  }
  JobStore store;
  store.host = host;
  store.port = static_cast<std::uint16_t>(*port);
  store.key_prefix = "memseal/" + rank.run_id + "/" +
                     std::to_string(environmentNumber("TORCHELASTIC_RESTART_COUNT").value_or(0)) +
                     "/";
  // Read on rank 0, which is on node 0: its own node's count.
  store.ranks_of_node_zero = static_cast<int>(*local_world_size);
  return store;
}

void announceToNodeZero(const RankIdentity& rank) {
  std::optional<JobStore> store = jobStoreOf(rank);
  if (!store || rank.node == 0) return;
  try {
    connect(*store, kAnnounceTimeout)->set(tracedKey(*store, rank.rank), bytesOf("1"));
  } catch (const std::exception&) {
    // Rank 0 then does not wait for this rank; its report, if it reaches the store, is still read.
  }
}

void sendToNodeZero(const JobStore& store, const RankIdentity& rank, long pid,
                    const std::string& report_json) {
  std::string text =
      gatheredHead(rank, "node=" + std::to_string(rank.node) + "\nhost=" + hostName() +
                             "\npid=" + std::to_string(pid) + "\n") +
      report_json;
  try {
    std::unique_ptr<c10d::TCPStore> client = connect(store, kSendTimeout);
    std::size_t parts = std::max<std::size_t>(1, (text.size() + kPartBytes - 1) / kPartBytes);
    std::string key = rankKey(store, rank.rank);
    for (std::size_t part = 0; part < parts; ++part) {
      client->set(key + "/part/" + std::to_string(part),
                  bytesOf(text.substr(part * kPartBytes, kPartBytes)));
    }
    // Last: rank 0 waits for this key, so it never reads a report in part.
    client->set(key, bytesOf(std::to_string(parts)));
  } catch (const std::exception& error) {
    std::cerr << "memseal run: rank " << rank.rank
              << " could not send its report to the node of rank 0 (the job's store at "
              << store.host << ":" << store.port << ": " << firstLineOf(error.what())
              << "); it is in this node's own job folder\n"
              << std::flush;
  }
}

void gatherOtherNodes(const JobStore& store, const RankIdentity& rank, const std::string& directory,
                      std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::unique_ptr<c10d::TCPStore> client;
  std::string unreachable;
  try {
    // Stopped by a signal (no timeout), only a short try: the launcher may kill it soon.
    client = connect(store, std::max<std::chrono::milliseconds>(timeout, kAnnounceTimeout));
  } catch (const std::exception& error) {
    unreachable = firstLineOf(error.what());
  }
  const std::string waited = std::to_string(timeout.count() / 1000) + " s";
  for (int other = store.ranks_of_node_zero; other < rank.world_size; ++other) {
    std::string key = rankKey(store, other), text, why;
    if (client == nullptr) {
      why = "rank 0 could not reach the job's store at " + store.host + ":" +
            std::to_string(store.port) + " (" + unreachable + ")";
    } else {
      // Only a rank that memseal runs in has a report to wait for.
      bool traced = true;
      try {
        traced = client->check({tracedKey(store, other)});
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        // c10d reads a zero timeout as none at all: past the deadline, only a look.
        if (traced && left.count() > 0) client->wait({key}, left);
        if (client->check({key})) text = readRank(*client, key);
      } catch (const std::exception&) {
        // A wait that timed out: said below like a rank that never sent.
      }
      if (text.empty() && !traced) {
        why =
            "memseal did not run in it: its node's torchrun was started without memseal run "
            "in front of it";
      } else if (text.empty()) {
        why = "no report came from it through the job's store within " + waited +
              " of rank 0's end (it may have ended by a crash, a kill or _exit, or is still "
              "running); its own node's job folder has what memseal saw there";
      }
    }
    if (text.empty()) {
      RankIdentity missing = rank;
      missing.rank = other;
      text = gatheredHead(missing, "missing=" + why + "\n");
    }
    std::string error;
    std::string path = directory + "/rank-" + std::to_string(other) + kGatheredSuffix;
    if (!common::writeFileAtomically(path, text, &error)) {
      std::cerr << "memseal run: " << error << "\n" << std::flush;
    }
  }
}

void shareFinalReport(const RankIdentity& rank, long pid, const std::string& report_json,
                      const std::string& directory, std::chrono::milliseconds gather_timeout) {
  std::optional<JobStore> store = jobStoreOf(rank);
  if (!store) return;
  if (rank.node != 0) {
    sendToNodeZero(*store, rank, pid, report_json);
  } else if (rank.rank == 0) {
    gatherOtherNodes(*store, rank, directory, gather_timeout);
  }
}

}  // namespace memseal::inject
