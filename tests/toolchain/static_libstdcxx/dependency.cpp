#include <sstream>

// Stands for libtorch: built on the shared libstdc++, streams in use before the module loads.
extern "C" int dependencyWarmUp() {
  std::ostringstream out;
  out << 7 << 1.5;
  return static_cast<int>(out.str().size());
}
