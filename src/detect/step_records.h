// The leak detector's records of a run's steps: one StepSample per boundary, and the samples of
// the boundaries that read resident memory (a read is a system call: boundary_schedule.h's
// residentSchedule says which boundaries read it; the others carry the last reading). Each list is
// thinned in its older half past kMaxStepSamples (common::thinOlderHalf), in place, and what the
// verdict's renewals read of each is kept between renewals (run_series.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "detect/boundary_schedule.h"
#include "detect/resident_memory.h"
#include "detect/run_series.h"
#include "memseal/leak_detector.h"

namespace memseal::detect {

class StepRecords {
 public:
  static constexpr std::size_t kMaxStepSamples = 16384;

  explicit StepRecords(
      ResidentMemoryReader::Measure measure = ResidentMemoryReader::Measure::kResidentSet);
  StepRecords(const StepRecords&) = delete;
  StepRecords& operator=(const StepRecords&) = delete;

  // Resident memory into `sample`, the boundary's, begun at `start_ns`: read when the schedule says
  // so (on every boundary while `forming` a verdict), else the last reading carried over. In use:
  // less the records' own bytes and what malloc keeps free (`after_warmup` readings of it are kept
  // for ResidentMemoryReader::mallocFree).
  void readResidentMemory(StepSample& sample, std::int64_t start_ns, bool forming,
                          bool after_warmup);
  // The boundary's sample, its graph nodes alive carried over from the last one (counted only
  // where the verdict is renewed: setGraphNodesAlive).
  void add(StepSample sample);
  void setGraphNodesAlive(std::uint64_t alive) { per_step_.back().graph_nodes_alive = alive; }

  const std::vector<StepSample>& perStep() const { return per_step_; }
  const std::vector<StepSample>& residentReadings() const { return resident_readings_; }
  RunSeriesCache* perStepSeries() const { return &per_step_series_; }
  RunSeriesCache* residentSeries() const { return &resident_series_; }
  // The highest resident reading so far.
  std::int64_t residentHigh() const { return resident_high_; }
  // The resident memory that grew from before step `first` to step `last` (0 where either end has
  // no reading at or before it).
  std::int64_t residentGrowth(std::uint32_t first, std::uint32_t last) const;
  const ResidentMemoryReader& resident() const { return resident_; }

 private:
  // What the records themselves hold in resident memory: they grow with every step until they are
  // first thinned (16,384 samples of 48 bytes), their pages touched as they fill, and stay at that
  // size after. Taken out of the resident set, or a healthy loop's resident memory grows by these
  // bytes, which over ~16,000 steps looked like a slow native leak of ~60 bytes a step.
  std::int64_t ownBytes() const;

  ResidentMemoryReader resident_;
  CostBoundedSchedule resident_schedule_ = residentSchedule();
  std::vector<StepSample> per_step_;
  std::vector<StepSample> resident_readings_;
  // The most samples each held (their pages touched; see ownBytes).
  std::size_t per_step_most_ = 0;
  std::size_t resident_readings_most_ = 0;
  mutable RunSeriesCache per_step_series_;
  mutable RunSeriesCache resident_series_;
  std::int64_t resident_high_ = 0;
};

}  // namespace memseal::detect
