// File: tests/testing/tensors.h
//
// Small helpers of the LibTorch tests: tensor differences, the replicated
// tower input of a grid, and the text of a c10::Error (expect_error.h has the
// torch-free core's frameshard::Error counterpart).
//
// Usage:
//   using frameshard::testing::max_abs_diff;
//   EXPECT_LE(max_abs_diff(got, want), 1e-12);
//   auto outs = tower->forward(frameshard::testing::full_input(pixels, grid));
//   std::string m = frameshard::testing::torch_error_of([&] { f(); });
//   EXPECT_NE(m.find("expected rank in [0, 2)"), std::string::npos) << m;
#pragma once

#include <frameshard/frames.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace testing {

/// max |a - b| in float64 (0 when both are empty; NaN propagates, so a
/// bound on it fails).
inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) {
    return 0.0;
  }
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// Patch rows of a grid: sum of t * h * w.
inline int64_t patch_rows(const std::vector<GridThw>& grid) {
  int64_t n = 0;
  for (const auto& g : grid) {
    n += g.patches();
  }
  return n;
}

/// The whole grid as one tower input (the replicated path's).
inline TowerInput full_input(
    const at::Tensor& pixels, const std::vector<GridThw>& grid) {
  return {pixels, grid_to_tensor(grid), frame_cu_seqlens(grid)};
}

/// Runs `fn`, expects a c10::Error and returns its text without the C++
/// backtrace; a call that does not throw is a test failure (and returns "").
template <typename Fn>
std::string torch_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  ADD_FAILURE() << "expected a c10::Error";
  return "";
}

}  // namespace testing
}  // namespace frameshard
