// The report's sections, one file each: the check (verdict and timeline, findings, device memory),
// explain and fit. Each renders its document's card(s) as HTML; page.cpp puts them on the page.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/html/json_reader.h"

namespace memseal::report::html {

// ---- the check (memseal.check/1) ----

// One step's numbers from the check's per_step (or, in older files, its live_bytes).
struct StepSample {
  double step = 0;
  std::optional<double> live, resident, count, graph_nodes;
};

std::vector<StepSample> stepSamples(const ReadJson& check);
bool isLeak(const ReadJson& check);
// Resident growth (graph nodes, untracked growth) is drawn against the resident axis; storage
// against the tracked bytes.
bool growsResident(const ReadJson& finding);
std::string verdictHtml(const ReadJson& check, const std::vector<StepSample>& samples);
std::string timelineChart(const ReadJson& check, const std::vector<StepSample>& samples);
std::string timelineCard(const ReadJson& check, const std::vector<StepSample>& samples);
// The check's optional "devices": a card per device (CUDA devices today), or nothing.
std::string deviceMemoryHtml(const ReadJson& check);
std::string checkSection(const ReadJson& check);

// ---- explain (memseal.explain/1) and fit (memseal.fit/2, and /1) ----

std::string explainSection(const ReadJson& explain);
std::string fitSection(const ReadJson& fit);

// ---- a distributed job's ranks (memseal.merged/1) ----

std::string mergedSection(const ReadJson& merged);

// ---- two runs compared (memseal.diff/1) ----

std::string diffSection(const ReadJson& diff);

}  // namespace memseal::report::html
