#include "track/python_frames.h"

#include <atomic>

namespace memseal::track {

namespace {
std::atomic<const PythonFrameProvider*> g_provider{nullptr};
}  // namespace

void setPythonFrameProvider(const PythonFrameProvider* provider) {
  g_provider.store(provider, std::memory_order_release);
}

bool pythonFramesAvailable() { return g_provider.load(std::memory_order_acquire) != nullptr; }

std::uint32_t capturePythonStack() {
  const PythonFrameProvider* provider = g_provider.load(std::memory_order_acquire);
  return provider != nullptr ? provider->capture() : 0;
}

void appendPythonFrames(std::uint32_t python_stack, std::vector<StackFrame>& frames) {
  const PythonFrameProvider* provider = g_provider.load(std::memory_order_acquire);
  if (provider != nullptr && python_stack != 0) provider->symbolize(python_stack, frames);
}

bool pythonFramesReadableNow() {
  const PythonFrameProvider* provider = g_provider.load(std::memory_order_acquire);
  return provider == nullptr || provider->symbolizes_without_waiting();
}

}  // namespace memseal::track
