// The towers' backward graph grows linearly with the frames of a batch:
// every family takes its frames' rows from one split per tensor, not one
// narrow (slice) per frame, whose backward zero-fills a gradient of ALL rows
// that autograd then sums: O(frames x rows) per layer. That cost made the
// replicated arm of `frameshard ab` superlinear in the batch (RADIO's
// vision time 0.44 s a step, 0.15 s after; the A/B ratio 0.34 -> 0.54).
// Timing is the benchmarks' job; this counts the graph's slice nodes, which
// must not depend on the number of frames.

#include <frameshard/models/qwen_vision.h>

#include "testing/qwen_fixtures.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using testing::random_model;
using testing::random_pixels;
using testing::run_tower;
using testing::tiny_config;

// Nodes of the autograd graph behind `outs` whose name is `name`.
int64_t graph_nodes(
    const std::vector<at::Tensor>& outs, const std::string& name) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> stack;
  for (const at::Tensor& o : outs) {
    if (o.grad_fn()) {
      stack.push_back(o.grad_fn().get());
    }
  }
  int64_t count = 0;
  while (!stack.empty()) {
    const torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) {
      continue;
    }
    count += node->name() == name;
    for (const torch::autograd::Edge& e : node->next_edges()) {
      if (e.function) {
        stack.push_back(e.function.get());
      }
    }
  }
  return count;
}

// `frames` frames alternating between two sizes: no two neighbours batch
// into one attention call, and RADIO resamples its position table once per
// size (a slice of the resampled table, the frame's own size, not the
// batch's).
std::vector<GridThw> alternating_frames(int64_t frames) {
  std::vector<GridThw> grid;
  for (int64_t f = 0; f < frames; ++f) {
    grid.push_back({1, f % 2 == 0 ? 2 : 4, 4});
  }
  return grid;
}

class TowerGraphTest : public ::testing::TestWithParam<QwenFamily> {};

TEST_P(TowerGraphTest, SliceNodesDoNotGrowWithTheFrames) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kFloat, 7);
  auto slices = [&](int64_t frames) {
    const std::vector<GridThw> grid = alternating_frames(frames);
    const auto outs = run_tower(m, random_pixels(cfg, grid, at::kFloat), grid);
    return graph_nodes(outs, "SliceBackward0");
  };
  const int64_t few = slices(3);
  const int64_t many = slices(12);
  EXPECT_EQ(many, few) << "slice nodes with 3 frames: " << few
                       << ", with 12: " << many;
  // The split that replaced the slices is there (the count is not trivial).
  const std::vector<GridThw> grid = alternating_frames(3);
  EXPECT_GT(
      graph_nodes(
          run_tower(m, random_pixels(cfg, grid, at::kFloat), grid),
          "SplitWithSizesBackward0"),
      0);
}

INSTANTIATE_TEST_SUITE_P(
    Families,
    TowerGraphTest,
    ::testing::Values(
        QwenFamily::kQwen2VL,
        QwenFamily::kQwen2_5VL,
        QwenFamily::kQwen3VL,
        QwenFamily::kRadio),
    testing::family_name);

}  // namespace
}  // namespace models
}  // namespace frameshard
