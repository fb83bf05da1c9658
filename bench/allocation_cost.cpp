// The hot path's own cost, for callgrind: `count` CPU allocations of 256 bytes (each freed right
// away) through libtorch's CPU allocator, with nothing installed, with memseal's allocator hook
// installed but no tracker, or with a tracker (stacks and ops off: the allocation path alone). Run
// it with two counts and divide the difference of the instruction totals by the difference of the
// counts: start-up cancels out (bench/allocation_cost.sh).
// With THREADS, that many threads each make COUNT allocations: where shared counters would bounce
// between cores (bench/allocation_cost.sh times it).
//   memseal_bench_allocation_cost off|hook|tracked COUNT [THREADS]
#include <c10/core/CPUAllocator.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "memseal/scope.h"
#include "memseal/tracker.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s off|hook|tracked COUNT [THREADS]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  long count = std::atol(argv[2]);
  std::unique_ptr<memseal::NoAllocationScope> hook;
  std::unique_ptr<memseal::Tracker> tracker;
  if (std::strcmp(mode, "hook") == 0) {
    hook = std::make_unique<memseal::NoAllocationScope>();  // holds the hook, tracks nothing
  } else if (std::strcmp(mode, "tracked") == 0) {
    memseal::TrackerOptions options;
    options.stacks = memseal::StackMode::kOff;
#if defined(MEMSEAL_BENCH_OLD_OPTIONS)
    options.watch_ops = false;  // memseal before the one-knob options
#else
    options.watch_ops = memseal::OpWatching::off();
#endif
    options.record_tensor_metadata = false;
    tracker = std::make_unique<memseal::Tracker>(options);
    tracker->start();
  } else if (std::strcmp(mode, "off") != 0) {
    std::fprintf(stderr, "unknown mode '%s' (off, hook or tracked)\n", mode);
    return 2;
  }
  int threads = argc == 4 ? std::atoi(argv[3]) : 1;
  c10::Allocator* allocator = c10::GetCPUAllocator();
  auto allocate = [allocator, count] {
    for (long i = 0; i < count; ++i) {
      c10::DataPtr allocation = allocator->allocate(256);
      static_cast<char*>(allocation.get())[0] = 1;
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(allocate);
  allocate();
  for (std::thread& worker : workers) worker.join();
  return 0;
}
