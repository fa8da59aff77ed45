// `frameshard calibrate --check`: per preset and CP size, each rank's share
// of the plan made with the calibrated model timed one rank after another
// (tools/tower_timing.h), against the time the model predicts for it; and
// the slowest rank of that plan against the slowest rank of the plan the
// FLOP model makes for the same batch.
//
// Usage:
//   CheckRequest req;  // presets, CP sizes, scaling
//   CheckSummary s = run_calibration_check(model, calibrated, flop, req);
//   s.max_abs_error;   // worst |predicted / measured - 1| over all ranks
#pragma once

#include <frameshard/cost.h>
#include <frameshard/models/qwen_factory.h>

#include "tower_timing.h"

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

struct CheckRequest {
  std::vector<std::string> presets{"mixed", "doc", "video", "multi"};
  std::vector<int64_t> cps{2, 4};
  int64_t max_frame_patches = 4096;  // the largest calibrated size
  int64_t max_patches = 16384;
  TimingRun run;
  double per_call = 0.0;  // seconds once per rank (QuadraticFit::per_call)
};

struct CheckSummary {
  double max_abs_error = 0.0;  // over every rank of every plan
  double mean_abs_error = 0.0;
  int plans_not_worse = 0;  // calibrated slowest <= FLOP slowest * 1.02
  int plans = 0;
};

/// Prints the tables to stdout and returns the summary.
CheckSummary run_calibration_check(
    const models::QwenVisionModel& tower,
    const CostModel& calibrated,
    const CostModel& flop,
    const CheckRequest& request);

/// Seconds `model` predicts for one rank's share: its real, floor and dummy
/// frames (everything the tower runs on), plus `per_call`.
double predicted_rank_seconds(
    const CostModel& model, const RankShard& rank, double per_call);

}  // namespace cli
}  // namespace frameshard
