// Numbers for people and the small HTML pieces the report's sections share: cells, tiles, hints,
// ops, tensors, stack frames. Every function returns HTML-safe text.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "report/html/json_reader.h"

namespace memseal::report::html {

inline constexpr const char* kDash = "&#8212;";

std::string bytesText(double bytes);
std::string bytesText(const std::optional<double>& bytes);
std::string countText(double count);
std::string countText(const std::optional<double>& count);
std::string percentText(double part, double whole);
std::string ratioPercentText(const std::optional<double>& ratio);
std::string plural(double count, const char* one, const char* many);
std::string numCell(const std::string& html);
std::string cell(const std::string& html);
std::string codeText(const std::string& text);
std::string muted(const std::string& html);
std::string orDash(double value, const std::string& html);
std::string tile(const std::string& label, const std::string& value_html,
                 const std::string& note_html = "");
std::string richText(const std::string& text);
std::string hintHtml(const char* title, const std::string& hint);
std::string notesHtml(const std::vector<std::string>& notes);
std::string opHtml(const ReadJson& site);
std::string scopeHtml(const ReadJson& site);
std::string shapeText(const ReadJson& shape);
std::string shapeRangeText(const ReadJson& shapes);
std::string tensorHtml(const ReadJson& tensor, const ReadJson& shapes = nullJson());
std::string frameHtml(const ReadJson& frame, std::size_t depth);
std::string stackHtml(const ReadJson& frames);
// The innermost frame of a site that is the user's: where to look first.
std::string firstUserFrameHtml(const ReadJson& site);

}  // namespace memseal::report::html
