// Non-negative least squares on relative errors, for the cost fits
// (calibrate.cpp's fit_quadratic, online_cost.cpp's fit_workloads).
//
//   minimise  sum_i (row_i . x / seconds_i - 1)^2   over x >= 0
//
// Each sample weighs by 1 / its time, so a small frame's call counts as
// much as a large one's. Exact for up to kMaxFeatures unknowns: the optimum
// has some set of free coefficients at which the unconstrained fit is
// feasible, so every subset is solved (normal equations, unit-norm columns)
// and the feasible one with the least error wins. Pure, thread-safe.
#pragma once

#include <array>
#include <vector>

namespace frameshard::detail {

constexpr int kMaxFeatures = 6;
using FeatureRow = std::array<double, kMaxFeatures>;

struct NnlsFit {
  FeatureRow x{};  // >= 0; features at or past `features` stay 0
  double squared_error = 0.0;
};

/// Fits the first `features` (1..kMaxFeatures) columns of `rows` to
/// `seconds` (same length, every entry > 0). A column that no subset can
/// use (all zero, or a copy of another) stays 0.
NnlsFit nnls_relative(
    const std::vector<FeatureRow>& rows,
    const std::vector<double>& seconds,
    int features);

}  // namespace frameshard::detail
