#include "report/html/json_reader.h"

#include <algorithm>
#include <cmath>

namespace memseal::report::html {

const ReadJson& nullJson() {
  static const ReadJson kNull;
  return kNull;
}

const ReadJson& emptyArray() {
  static const ReadJson kEmpty = ReadJson::array();
  return kEmpty;
}

const ReadJson& member(const ReadJson& object, const char* key) {
  if (!object.is_object()) return nullJson();
  auto found = object.find(key);
  return found == object.end() ? nullJson() : *found;
}

// Booleans are not numbers here (nlohmann agrees), and NaN or infinity from a document built in
// code counts as missing: it would otherwise end up as an SVG coordinate.
std::optional<double> numberOf(const ReadJson& value) {
  if (!value.is_number()) return std::nullopt;
  double number = value.get<double>();
  if (!std::isfinite(number)) return std::nullopt;
  return number;
}

std::optional<double> numberAt(const ReadJson& object, const char* key) {
  return numberOf(member(object, key));
}

double numberOr(const ReadJson& object, const char* key, double fallback) {
  return numberAt(object, key).value_or(fallback);
}

std::string textAt(const ReadJson& object, const char* key) {
  const ReadJson& value = member(object, key);
  return value.is_string() ? value.get<std::string>() : std::string();
}

std::optional<bool> flagAt(const ReadJson& object, const char* key) {
  const ReadJson& value = member(object, key);
  if (!value.is_boolean()) return std::nullopt;
  return value.get<bool>();
}

const ReadJson& arrayAt(const ReadJson& object, const char* key) {
  const ReadJson& value = member(object, key);
  return value.is_array() ? value : emptyArray();
}

std::vector<std::string> stringsAt(const ReadJson& object, const char* key) {
  std::vector<std::string> strings;
  for (const ReadJson& value : arrayAt(object, key)) {
    if (value.is_string()) strings.push_back(value.get<std::string>());
  }
  return strings;
}

// Data far outside anything a process can hold still has to become a finite SVG coordinate.
double clampForChart(double value) { return std::clamp(value, -1e18, 1e18); }

}  // namespace memseal::report::html
