// File: frameshard/calibrate.h
//
// Fitting the cost model to timings. `frameshard calibrate` times the tower
// on single frames of p patch rows and fits
//
//   cost(p) = a*p^2 + b*p + c,   a, b, c >= 0
//
// A timed call of k frames of p rows takes per_call + k * cost(p): the
// per-call constant (patch embedding and rotary setup, the merger, launch
// and autograd overheads) is paid once per rank, whatever its frames, so
// it does not change which partition is best, but it is part of a rank's
// time. Samples with k > 1 separate it from c; with single frames only it
// is folded into c (per_call = 0).
//
// The fit is non-negative least squares on the relative error (each sample
// weighted by 1 / its time, so a 64-patch frame counts as much as a
// 4096-patch one; the planner compares frames of very different sizes).
// With four coefficients the exact NNLS solution is the best feasible one
// among the unconstrained fits on every subset of {a, b, c, per_call},
// which is what fit_quadratic computes.
// The coefficients are in seconds when the samples are, and that is what
// the calibration file holds (CostModel::seconds_per_unit = 1).
//
// The calibration file (write_calibration / read_calibration) is text:
// comment lines starting with '#' (how it was measured, the fit error per
// size), then one line "quadratic:a,b,c". The config's cost_alpha accepts
// its path (frameshard/cost.h).
//
// Usage:
//   std::vector<frameshard::TimingSample> s = {{64, 0.0012}, {1024, 0.019},
//                                              {4096, 0.11}};
//   frameshard::QuadraticFit fit = frameshard::fit_quadratic(s);
//   fit.model(1024);           // predicted seconds of one more frame
//   fit.max_relative_error;    // worst |predicted / measured - 1|
//
// Pure functions, thread-safe.
#pragma once

#include <frameshard/cost.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

/// One measurement: the time of one call on `frames` frames of `patch_rows`
/// rows each.
struct TimingSample {
  int64_t patch_rows = 0;
  double seconds = 0.0;
  int64_t frames = 1;
};

struct QuadraticFit {
  CostModel model;        // quadratic(a, b, c), seconds_per_unit = 1
  double per_call = 0.0;  // seconds once per call (banner)
  /// predicted / measured - 1 per sample, in the order given.
  std::vector<double> relative_errors;
  double max_relative_error = 0.0;  // max |relative_errors|
  double rms_relative_error = 0.0;
};

/// Fits per_call + frames * (a*p^2 + b*p + c) (all >= 0) to at least one
/// sample (patch_rows > 0, frames > 0, seconds > 0 and finite). Throws
/// frameshard::Error naming the sample.
QuadraticFit fit_quadratic(const std::vector<TimingSample>& samples);

/// The calibration file's text: each line of `comment` prefixed by "# ",
/// then "quadratic:a,b,c" (17 significant digits, round-trips).
std::string calibration_text(
    const CostModel& model, const std::string& comment);

/// Reads a calibration file into a cost model (label "calibrated <path>",
/// seconds_per_unit = 1). Throws frameshard::Error naming `field`, what was
/// expected and what the file holds.
CostModel read_calibration(const std::string& path, const char* field);

}  // namespace frameshard
