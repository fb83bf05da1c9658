// Starts THREADS threads that each touch the thread-local block of a module loaded with dlopen,
// runs LeakSanitizer's check while they are all alive, and prints what it found:
//
//   dynamic_tls_probe MODULE.so THREADS [leak]
//
// With ASan's __tls_get_addr interception on (intercept_tls_get_addr=1, the runtime's default), the
// sanitizer runtime of GCC 12 misreads those blocks that land 16 bytes past a page boundary
// and LeakSanitizer's tracer crashes ("Tracer caught signal 11"): with 512 threads, in every run on
// this project's build machine. With the option the test programs start with
// (tests/asan/asan_defaults.cpp) the check completes, and with `leak`, it still finds the block
// the probe leaked on purpose.
#include <dlfcn.h>
#include <sanitizer/lsan_interface.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

void* g_kept = nullptr;

// A block nothing points to once this returns: a leak LeakSanitizer must report.
__attribute__((noinline)) void leakABlock() {
  g_kept = std::malloc(4096);
  std::memset(g_kept, 1, 4096);
  g_kept = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dynamic_tls_probe MODULE.so THREADS [leak]\n");
    return 2;
  }
  int threads = std::atoi(argv[2]);
  bool leak = argc > 3 && std::strcmp(argv[3], "leak") == 0;
  void* module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    std::fprintf(stderr, "dynamic_tls_probe: %s\n", dlerror());
    return 2;
  }
  auto touch = reinterpret_cast<char* (*)()>(dlsym(module, "memseal_probe_touch_tls"));
  if (touch == nullptr) {
    std::fprintf(stderr, "dynamic_tls_probe: %s has no memseal_probe_touch_tls\n", argv[1]);
    return 2;
  }
  std::mutex mutex;
  std::condition_variable changed;
  int touched = 0;
  bool checked = false;
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      touch();
      std::unique_lock<std::mutex> lock(mutex);
      ++touched;
      changed.notify_all();
      changed.wait(lock, [&] { return checked; });
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return touched == threads; });
  }
  if (leak) leakABlock();
  int leaks_found = __lsan_do_recoverable_leak_check();
  {
    std::lock_guard<std::mutex> lock(mutex);
    checked = true;
  }
  changed.notify_all();
  for (std::thread& worker : workers) worker.join();
  std::printf("dynamic_tls_probe: %d threads, leak check done, leaks found: %s\n", threads,
              leaks_found != 0 ? "yes" : "no");
  // Before LeakSanitizer's check at exit, which ends the process with `leak` without flushing.
  std::fflush(stdout);
  return 0;
}
