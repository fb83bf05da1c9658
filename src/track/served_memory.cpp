// Blocks come and go with plans, rarely; frees of served memory on the running thread never get
// here (the region takes them first), so one mutex over an ordered map is enough.
#include "track/served_memory.h"

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include "track/arena_region.h"

namespace memseal::track {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, std::pair<std::uintptr_t, ServedMemory*>> owners;  // begin -> end, owner
  std::atomic<std::size_t> count{0};
};

Registry& registry() {
  static auto* served = new Registry();  // never destroyed: frees may come during exit
  return *served;
}

}  // namespace

void registerServedMemory(const void* begin, std::size_t bytes, ServedMemory* owner) {
  auto start = reinterpret_cast<std::uintptr_t>(begin);
  Registry& served = registry();
  std::lock_guard<std::mutex> lock(served.mutex);
  served.owners[start] = {start + bytes, owner};
  served.count.store(served.owners.size(), std::memory_order_release);
}

void unregisterServedMemory(const void* begin) {
  Registry& served = registry();
  std::lock_guard<std::mutex> lock(served.mutex);
  served.owners.erase(reinterpret_cast<std::uintptr_t>(begin));
  served.count.store(served.owners.size(), std::memory_order_release);
}

bool releaseServedAnywhere(void* data) {
  Registry& served = registry();
  if (served.count.load(std::memory_order_acquire) == 0) return false;
  auto address = reinterpret_cast<std::uintptr_t>(data);
  ServedMemory* owner = nullptr;
  {
    std::lock_guard<std::mutex> lock(served.mutex);
    auto after = served.owners.upper_bound(address);
    if (after == served.owners.begin()) return false;
    auto found = std::prev(after);
    if (address >= found->second.first) return false;
    owner = found->second.second;
  }
  // Outside the lock: releasing the last served tensor deletes the owner, which unregisters. The
  // owner is alive here because `data`, served by it and not yet freed, holds a reference to it.
  return owner->releaseServed(data);
}

}  // namespace memseal::track
