// File: tests/testing/test_tower.h
//
// A tiny functional tower for the runtime and harness tests: a per-row
// linear map plus a per-frame position signal (row index inside its frame,
// from cu_seqlens), tanh, then the mean over each group of merge^2
// consecutive rows (a 2x2 merger); extra "DeepStack" outputs are functions
// of the merged rows. It checks that grid_thw and cu_seqlens describe its
// pixel rows frame by frame, so a wrong local grid or cu_seqlens fails
// loudly, and a wrong frame split changes the outputs. Outputs: 1 to 3, of
// widths kTestHidden1, kTestHidden2, kTestHidden3.
//
// Usage:
//   const auto params = testing::random_test_tower_params(at::kDouble);
//   auto outs = testing::test_tower(params, input, /*outputs=*/2);
//   // for the parity harness (parameters drawn from torch's generator):
//   parity::TowerFactory f = testing::test_tower_factory(2);
#pragma once

#include "parity/parity.h"
#include "testing/plan_options.h"

#include <frameshard/frames.h>
#include <frameshard/plan.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace testing {

constexpr int64_t kTestFeatures = 12;  // pixel row width
constexpr int64_t kTestMerge = 2;
constexpr int64_t kTestHidden1 = 6;
constexpr int64_t kTestHidden2 = 5;
constexpr int64_t kTestHidden3 = 3;

// Images mixed with videos (10 frame units, 31 tokens).
inline const std::vector<GridThw> kMixedGrid = {
    {1, 4, 4}, {2, 4, 6}, {1, 2, 2}, {3, 2, 4}, {1, 6, 4}, {2, 2, 2}};

struct TestTowerParams {
  at::Tensor w1, b1, pos, w2, w3;
  std::vector<at::Tensor> list() const {
    return {w1, b1, pos, w2, w3};
  }
};

/// Drawn from torch's generator (float64 * 0.5, then `dtype`).
TestTowerParams random_test_tower_params(at::ScalarType dtype);

/// Detached copies, as leaves that require grad or not.
TestTowerParams leaf_copy(const TestTowerParams& p, bool requires_grad);

/// The tower (see the banner); `outputs` in 1..3.
std::vector<at::Tensor> test_tower(
    const TestTowerParams& p, const TowerInput& in, int outputs);

/// The tower's merger and extra outputs on its per-row hidden states h
/// [rows, kTestHidden1] (rows a multiple of merge^2): what towers built on
/// the test tower (tests/testing/mesh_problem.h) share.
std::vector<at::Tensor> test_tower_heads(
    const TestTowerParams& p, const at::Tensor& h, int outputs);

/// Fresh trainable parameters per call, named w1 b1 pos w2 w3.
parity::TowerFactory test_tower_factory(int outputs);

}  // namespace testing
}  // namespace frameshard
