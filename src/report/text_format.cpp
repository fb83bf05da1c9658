// Text pieces shared by memseal's text reports.
#include "report/text_format.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/text.h"

namespace memseal::report {

std::string padded(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

std::string wrap(const std::string& text, std::size_t width, const std::string& indent) {
  // Code spans (`total_loss += loss`) stay on one line: a break inside one misreads as code.
  std::istringstream stream(text);
  std::vector<std::string> tokens;
  std::string piece;
  while (stream >> piece) {
    bool inside_span =
        !tokens.empty() && std::count(tokens.back().begin(), tokens.back().end(), '`') % 2 == 1;
    if (inside_span) {
      tokens.back() += " " + piece;
    } else {
      tokens.push_back(piece);
    }
  }
  std::string out;
  std::size_t column = 0;
  for (const std::string& word : tokens) {
    if (column > 0 && column + 1 + word.size() > width) {
      out += "\n" + indent;
      column = 0;
    } else if (column > 0) {
      out += " ";
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out;
}

namespace {
constexpr int kUserFramesShown = 4;

std::string frameText(const StackFrame& frame) {
  std::string text = frame.function.empty() ? common::hexAddress(frame.address) : frame.function;
  // A lambda inlined into std::function's invoker carries the invoker's long name.
  if (text.rfind("std::_Function_handler<", 0) == 0 || text.rfind("std::__invoke", 0) == 0) {
    text = "(lambda)";
  }
  if (text.size() > 90) text = text.substr(0, 87) + "...";
  if (!frame.file.empty()) {
    text += "  " + common::shownPath(frame.file) + ":" + std::to_string(frame.line);
  }
  return text;
}

// The user's frames first; runs of internal frames (libtorch, the runtime) folded into one line.
}  // namespace

std::vector<std::string> stackLines(const std::vector<StackFrame>& frames) {
  std::vector<std::string> lines;
  int user_shown = 0;
  int folded = 0;
  std::vector<std::string> folded_libraries;
  auto flush = [&] {
    if (folded == 0) return;
    std::string libraries;
    for (std::size_t i = 0; i < folded_libraries.size() && i < 2; ++i) {
      libraries += (i ? ", " : "") + folded_libraries[i];
    }
    if (folded_libraries.size() > 2) libraries += ", ...";
    lines.push_back("... " + common::countedText(folded, "frame") + " in " + libraries);
    folded = 0;
    folded_libraries.clear();
  };
  for (const StackFrame& frame : frames) {
    if (frame.is_internal) {
      std::string library = common::baseName(frame.library);
      if (std::find(folded_libraries.begin(), folded_libraries.end(), library) ==
          folded_libraries.end()) {
        folded_libraries.push_back(library);
      }
      ++folded;
      continue;
    }
    if (user_shown >= kUserFramesShown) break;
    flush();
    lines.push_back(frameText(frame));
    ++user_shown;
  }
  if (user_shown == 0)
    lines.clear();  // nothing of the user's: the op says more than libtorch frames
  return lines;
}

std::string tensorText(const TensorInfo& tensor) {
  if (!tensor.known) {
    return tensor.device.empty() ? "(no tensor metadata)"
                                 : "(no tensor metadata) on " + tensor.device;
  }
  std::ostringstream text;
  text << common::shapeText(tensor.shape) << " " << tensor.dtype;
  if (!tensor.device.empty()) text << " " << tensor.device;
  text << "  requires_grad=" << (tensor.requires_grad ? "true" : "false");
  if (!tensor.grad_fn.empty()) text << "  grad_fn=" << tensor.grad_fn;
  return text.str();
}

}  // namespace memseal::report
