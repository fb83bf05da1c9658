// A job across machines (torchrun --nnodes N, each node's agent under its own `memseal run`):
// every rank of the other nodes sends its final report through the job's own rendezvous store,
// and rank 0 waits for them and leaves them in its session folder, so the memseal of rank 0's
// node merges the whole job into one view without a shared file system. Each node's memseal still
// writes its own ranks' reports locally.
//
// The store is torchrun's: the agent of one node hosts it for the rendezvous and shares it with
// the workers (TORCHELASTIC_USE_AGENT_STORE=True, MASTER_ADDR:MASTER_PORT), and that agent waits
// at its exit barrier until every node's workers have ended, so the store outlives every rank's
// exit. A store hosted by rank 0's own process instead (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) may
// be gone before the others end: then nothing is gathered, and each node's folder is the record.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "memseal/leak_detector.h"

namespace memseal::inject {

// Where this rank's job keeps its store, and the keys of this attempt (a restarted worker group
// is a new attempt: its reports are not mixed with the last one's).
struct JobStore {
  std::string host;
  std::uint16_t port = 0;
  std::string key_prefix;      // "memseal/RUN_ID/ATTEMPT/"
  int ranks_of_node_zero = 0;  // ranks 0 .. this - 1 run on rank 0's node (torchrun's numbering)
};

// The store of `rank`'s job where it spans two or more nodes and its store is the agents' (see
// above); empty otherwise (one machine, another launcher, a store of rank 0's process).
std::optional<JobStore> jobStoreOf(const RankIdentity& rank);

// A rank of another node than rank 0's, as memseal starts in it (on the runtime's own thread: it
// may wait for the store): says so in the store, so that rank 0 waits for its report, and for no
// rank of a node whose torchrun was started without memseal. Nothing elsewhere.
void announceToNodeZero(const RankIdentity& rank);

// A rank of another node than rank 0's: sends `report_json` (its final report) to the store, with
// who it is (its pid, this machine's name). Says on stderr when the store cannot be reached: the
// report is then only in this node's own folder.
void sendToNodeZero(const JobStore& store, const RankIdentity& rank, long pid,
                    const std::string& report_json);

// Rank 0: waits up to `timeout` for the report of every rank of the other nodes, and writes each
// into `directory` as rank-R.gathered (run_protocol.h), or, for one that never came, a file that
// says why. With a zero timeout it takes only what is there already (the program is being stopped
// by a signal and must not wait).
void gatherOtherNodes(const JobStore& store, const RankIdentity& rank, const std::string& directory,
                      std::chrono::milliseconds timeout);

// A rank's final report at its exit: sent by a rank of another node, the others gathered by rank
// 0, nothing for the other ranks of node 0 or outside a job across machines.
void shareFinalReport(const RankIdentity& rank, long pid, const std::string& report_json,
                      const std::string& directory, std::chrono::milliseconds gather_timeout);

}  // namespace memseal::inject
