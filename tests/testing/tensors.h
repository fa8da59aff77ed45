// File: tests/testing/tensors.h
//
// Small helpers of the LibTorch tests: tensor differences (and, through
// torch_error.h, the text of a c10::Error); the replicated tower input of a
// grid is frameshard::whole_frames_input (frameshard/tower.h).
//
// Usage:
//   using frameshard::testing::max_abs_diff;
//   EXPECT_LE(max_abs_diff(got, want), 1e-12);
//   auto outs = tower->forward(frameshard::whole_frames_input(pixels, grid));
//   std::string m = frameshard::testing::torch_error_of([&] { f(); });
//   EXPECT_NE(m.find("expected rank in [0, 2)"), std::string::npos) << m;
#pragma once

#include <frameshard/frames.h>
#include <frameshard/tower.h>

#include "testing/torch_error.h"

#include <ATen/ATen.h>

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

}  // namespace testing
}  // namespace frameshard
