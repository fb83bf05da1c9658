// Reads memseal's JSON documents leniently for the HTML report: a missing field, or one of the
// wrong type, reads as absent, so an older or damaged file still shows.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace memseal::report::html {

using ReadJson = nlohmann::json;

const ReadJson& nullJson();
const ReadJson& emptyArray();
const ReadJson& member(const ReadJson& object, const char* key);
std::optional<double> numberOf(const ReadJson& value);
std::optional<double> numberAt(const ReadJson& object, const char* key);
double numberOr(const ReadJson& object, const char* key, double fallback);
std::string textAt(const ReadJson& object, const char* key);
std::optional<bool> flagAt(const ReadJson& object, const char* key);
const ReadJson& arrayAt(const ReadJson& object, const char* key);
std::vector<std::string> stringsAt(const ReadJson& object, const char* key);
double clampForChart(double value);

}  // namespace memseal::report::html
