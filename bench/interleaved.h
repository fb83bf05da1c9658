// Side-by-side timing: every variant runs in turn within each repetition, so drift (frequency,
// other load) hits all of them alike; results are medians and ratios to the first variant, and
// beside them each variant's fastest repetition and its ratio: on a shared machine whose other
// work slows some repetitions by a third or more, that noise only adds time, and the fastest
// repetitions compare what the variants themselves cost.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace memseal::bench {

struct Variant {
  std::string name;
  std::function<void()> before;  // untimed: start a tracker, say
  std::function<void()> iteration;
  std::function<void()> after;
};

inline double medianOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Returns the median milliseconds per iteration of each variant.
inline std::vector<double> runInterleaved(const std::string& title, std::vector<Variant>& variants,
                                          int repetitions, int iterations) {
  repetitions = std::max(repetitions, 1);  // a median and a fastest need one at least
  std::vector<std::vector<double>> samples(variants.size());
  for (Variant& variant : variants) {  // warm-up, untimed
    if (variant.before) variant.before();
    for (int i = 0; i < 3; ++i) variant.iteration();
    if (variant.after) variant.after();
  }
  for (int repetition = 0; repetition < repetitions; ++repetition) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      // Alternate the order so no variant always runs right after another.
      std::size_t v = repetition % 2 ? variants.size() - 1 - k : k;
      Variant& variant = variants[v];
      if (variant.before) variant.before();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) variant.iteration();
      auto stop = std::chrono::steady_clock::now();
      if (variant.after) variant.after();
      samples[v].push_back(std::chrono::duration<double, std::milli>(stop - start).count() /
                           iterations);
    }
  }
  std::vector<double> medians;
  std::printf("\n%s (%d repetitions x %d iterations, interleaved)\n", title.c_str(), repetitions,
              iterations);
  std::printf("  %-50s %12s %10s %12s %10s\n", "variant", "median ms", "ratio", "fastest ms",
              "ratio");
  std::vector<double> fastest;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    medians.push_back(medianOf(samples[v]));
    fastest.push_back(*std::min_element(samples[v].begin(), samples[v].end()));
  }
  for (std::size_t v = 0; v < variants.size(); ++v) {
    std::printf("  %-50s %12.4f %9.3fx %12.4f %9.3fx\n", variants[v].name.c_str(), medians[v],
                medians[v] / medians[0], fastest[v], fastest[v] / fastest[0]);
  }
  return medians;
}

}  // namespace memseal::bench
