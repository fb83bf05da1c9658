// A broken case for memseal's own tests: it exports no `step`.
extern "C" __attribute__((visibility("default"))) void setup() {}
