// Text pieces shared by memseal's text reports (leaks, scopes): wrapped hints, stacks for people,
// tensors in one line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/text.h"
#include "memseal/tracker.h"

namespace memseal::report {

using common::bytesText;

// `text` then spaces to `width` columns (one space after text that reaches it): table columns.
std::string padded(const std::string& text, std::size_t width);

// Wraps at `width` columns; continuation lines start with `indent`. Code spans stay on one line.
std::string wrap(const std::string& text, std::size_t width, const std::string& indent);

// A stack for people: the user's frames first, runs of internal frames (libtorch, the C++ runtime,
// memseal) folded into one line each; empty when no frame is the user's.
std::vector<std::string> stackLines(const std::vector<StackFrame>& frames);
// "[32, 64] Float  requires_grad=true  grad_fn=ReluBackward0"
std::string tensorText(const TensorInfo& tensor);

}  // namespace memseal::report
