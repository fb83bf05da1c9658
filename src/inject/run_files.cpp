#include "inject/run_files.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <iterator>

#include "common/text.h"

namespace memseal::inject {

bool writeFileWhole(const std::string& path, const std::string& content) {
  static std::atomic<bool> failure_said{false};
  std::string error;
  if (common::writeFileAtomically(path, content, &error)) return true;
  if (!failure_said.exchange(true)) std::cerr << "memseal run: " << error << "\n" << std::flush;
  return false;
}

std::string programName() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(text.begin(), text.end(), '\0', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace memseal::inject
