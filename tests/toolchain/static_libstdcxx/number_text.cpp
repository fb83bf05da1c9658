#include <sstream>
#include <string>

extern "C" int dependencyWarmUp();

// What every memseal report does: numbers through a stream, after the dependency used its own.
extern "C" const char* numberText(unsigned long value) {
  static std::string text;
  dependencyWarmUp();
  std::ostringstream out;
  out << "steps " << value << " of " << 2.5;
  text = out.str();
  return text.c_str();
}
