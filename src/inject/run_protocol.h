// What `memseal run` (the launcher, src/cli/run_command.cpp) tells the program it starts, through
// its environment, and where the program's side leaves its reports. One header, so both sides
// agree; no code.
#pragma once

namespace memseal::inject {

// Set by the launcher for the program (and inherited by its children).
constexpr const char* kEnvRuntime = "MEMSEAL_RUN_RUNTIME";         // path of libmemseal_run.so
constexpr const char* kEnvDirectory = "MEMSEAL_RUN_DIR";           // where reports are written
constexpr const char* kEnvRootPid = "MEMSEAL_RUN_ROOT_PID";        // the program's own pid
constexpr const char* kEnvFollowFork = "MEMSEAL_RUN_FOLLOW_FORK";  // "1": children report too
// "0": a Python program's steps are loops found in its ops (--op-loops); else its own
// (framework_steps.h)
constexpr const char* kEnvProgramSteps = "MEMSEAL_RUN_PROGRAM_STEPS";
constexpr const char* kEnvStep = "MEMSEAL_RUN_STEP";  // "auto", "interval:NANOSECONDS", "on:NAME"
constexpr const char* kEnvWarmup = "MEMSEAL_RUN_WARMUP";  // warm-up steps, decimal
constexpr const char* kEnvOutput = "MEMSEAL_RUN_OUTPUT";  // text on SIGUSR1: a file, or stderr
// Set by the runtime of a distributed job's rank (RANK and WORLD_SIZE in its environment, as
// torchrun starts each): its pid, so a process the rank starts, which inherits RANK, is not taken
// for a rank of its own.
constexpr const char* kEnvRankPid = "MEMSEAL_RUN_RANK_PID";
// Set only with --memory-viz: the events a MemoryTrace keeps, decimal.
constexpr const char* kEnvMemoryVizEvents = "MEMSEAL_RUN_MEMORY_VIZ_EVENTS";
// How long rank 0 of a job across machines waits at its exit for the other nodes' reports
// (node_gather.h), in whole seconds; unset: kDefaultGatherSeconds.
constexpr const char* kEnvGatherSeconds = "MEMSEAL_RUN_GATHER_SECONDS";
constexpr int kDefaultGatherSeconds = 60;

// Written by each traced process into the directory: "PID.status" once memseal is active in it
// (lines "key=value": pid, ppid, kind = root | exec | fork, program; for a distributed job's rank
// also rank, local_rank, world_size and run_id), then "PID.json" (a
// memseal.check report) when it exits or is stopped by a signal, and, for forked children, after
// every time window (they may end in _exit, which runs no exit handler).
// With kEnvMemoryVizEvents, a process with a detector (not a forked child) also writes
// "PID.memory_viz.pickle" (torch.cuda.memory._snapshot()'s format) with its final report.
// While the program runs, the root and each exec'd process also keep "PID.interim.json": its latest
// report taken at a step boundary (at most one write a second), so a program that crashes, is
// killed or ends in _exit, which write no final report, still leaves its latest. Every file is
// written to a temporary name and renamed: complete or absent, never truncated.
//
// In a job across machines, rank 0 also writes "rank-R.gathered" for each rank R of the other
// nodes (node_gather.h): the line common::kGatheredSchema.tag() (memseal.gathered/1), lines
// "key=value" (rank, world_size, run_id, nodes, then node, host and pid of the rank's process, or
// missing=WHY where no report came), an empty line, then the rank's memseal.check report as it sent
// it (nothing after a missing=).
constexpr const char* kStatusSuffix = ".status";
constexpr const char* kGatheredSuffix = ".gathered";
constexpr const char* kInterimReportSuffix = ".interim.json";
constexpr const char* kReportSuffix = ".json";
constexpr const char* kMemoryVizSuffix = ".memory_viz.pickle";

}  // namespace memseal::inject
