// A statically linked program: `memseal run` must refuse it (no dynamic loader, no LD_PRELOAD).
#include <cstdio>

int main() {
  std::puts("static program ran");
  return 0;
}
