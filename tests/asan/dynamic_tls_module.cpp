// A module with a small thread-local block, loaded by tests/asan/dynamic_tls_probe.cpp with dlopen
// (as memseal loads libunwind): each thread's copy is dynamic TLS, which glibc allocates with
// malloc when the thread first touches it.
thread_local char g_cache[16];

extern "C" __attribute__((visibility("default"))) char* memseal_probe_touch_tls() {
  g_cache[0] = 1;
  return g_cache;
}
