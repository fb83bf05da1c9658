// The AddressSanitizer options every test program of the ASan build starts with (ASAN_OPTIONS in
// the environment still overrides them).
//
// intercept_tls_get_addr=0: the sanitizer runtime of GCC 12 (this build's; older LLVM runtimes too)
// takes a thread's dynamic TLS block whose address is 16 bytes past a page boundary for one that
// glibc 2.19 to 2.24 allocated with a header, and reads the 16 bytes before it (here: ASan's own
// chunk header) as that block's start and size. LeakSanitizer's stop-the-world tracer then scans
// that made-up range at exit and dies ("Tracer caught signal 11") after every test has passed
// (google/sanitizers#1322). memseal loads libunwind with dlopen, whose thread-local block is
// dynamic TLS that glibc allocates with malloc: about one in 128 such blocks lands on that offset,
// and the process then fails its leak check without a leak. tests/asan/dynamic_tls_probe.cpp shows
// the crash and that this option prevents it, with leak checks still on.
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "intercept_tls_get_addr=0";
}
