// The Qwen towers in one process (frameshard/models/qwen_towers.h), per
// family: input validation, and frame independence in float64 (encoding
// (t, h, w) equals encoding its t frames one at a time, 1e-12); then the
// family specifics: DeepStack output order, Qwen3.5 without DeepStack,
// Qwen2.5-VL's window attention. Sharded-vs-replicated parity over ranks
// is tests/dist/towers/qwen_towers_test.cpp.

#include <frameshard/models/qwen_vision.h>

#include "testing/qwen_fixtures.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using namespace testing;
using testing::patch_rows;  // over frameshard::patch_rows (frames.h)

TEST_P(QwenFamilyTest, ValidatesTowerInput) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kFloat, 6);
  const std::vector<GridThw> grid = {{2, 4, 4}};
  TowerInput in;
  in.pixel_values = at::randn({32, 24});
  in.grid_thw = grid_tensor(grid);
  in.cu_seqlens = cu_tensor(grid);
  EXPECT_EQ(m.tower(in)[0].size(0), 8);
  in.cu_seqlens = at::tensor({0, 32}, at::kInt);  // one segment: 2 frames
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "cu_seqlens");
  in.cu_seqlens = at::Tensor();  // derived from grid_thw
  EXPECT_EQ(m.tower(in)[0].size(0), 8);
  in.pixel_values = at::randn({32, 23});
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "pixel_values [rows, 24]");
  in.pixel_values = at::randn({31, 24});
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "expected 32 pixel rows");
  in.pixel_values = at::randn({24, 24});
  in.grid_thw = grid_tensor({{2, 3, 4}});
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "divisible by spatial_merge_size 2");
}

TEST_P(QwenFamilyTest, FramesAreIndependentFloat64) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kDouble, 7);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  const auto whole = run_tower(m, pixels, kMixed);
  // Every frame (1, h, w) on its own, concatenated in order.
  std::vector<std::vector<at::Tensor>> parts(whole.size());
  int64_t row = 0;
  for (const auto& g : kMixed) {
    for (int64_t t = 0; t < g.t; ++t) {
      const GridThw frame{1, g.h, g.w};
      const auto out = run_tower(m, pixels.narrow(0, row, g.h * g.w), {frame});
      for (size_t k = 0; k < out.size(); ++k) {
        parts[k].push_back(out[k]);
      }
      row += g.h * g.w;
    }
  }
  for (size_t k = 0; k < whole.size(); ++k) {
    const at::Tensor framewise = at::cat(parts[k], 0);
    ASSERT_EQ(framewise.sizes(), whole[k].sizes());
    const double d = max_abs_diff(framewise, whole[k]);
    RecordProperty("output" + std::to_string(k), sci(d));
    EXPECT_LE(d, 1e-12) << "output " << k;
  }
  // The frames of a video differ (their pixels do), so the check is real,
  // and so do identical frames at different sizes.
  const int64_t video_tokens = 6 * 4 / 4;  // tokens of one (1, 6, 4) frame
  const int64_t v0 = 6;                    // after the (1, 4, 6) image
  EXPECT_GT(
      max_abs_diff(
          whole[0].narrow(0, v0, video_tokens),
          whole[0].narrow(0, v0 + video_tokens, video_tokens)),
      1e-3);
}

// Also runs the TEST_Ps of qwen_weights_test.cpp (one instantiation per
// executable).
INSTANTIATE_TEST_SUITE_P(
    Families,
    QwenFamilyTest,
    ::testing::Values(
        QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL),
    family_name);

// ------------------------------------------------------------ family specifics

TEST(Qwen3VLTower, DeepstackOutputsFollowLayerOrder) {
  // HF appends DeepStack features while walking the layers, using merger
  // deepstack_visual_indexes.index(layer): with indexes [1, 0] the first
  // output comes from layer 0 through deepstack_merger_list.1.
  auto cfg = tiny_config(QwenFamily::kQwen3VL);
  const QwenVisionModel a = random_model(cfg, at::kDouble, 11);
  cfg.as<Qwen3VLVisionConfig>().deepstack_visual_indexes = {1, 0};
  const QwenVisionModel b = with_parameters_of(cfg, a, [](std::string key) {
    const std::string l0 = "deepstack_merger_list.0.";
    const std::string l1 = "deepstack_merger_list.1.";
    if (key.rfind(l0, 0) == 0) {
      key = l1 + key.substr(l0.size());
    } else if (key.rfind(l1, 0) == 0) {
      key = l0 + key.substr(l1.size());
    }
    return key;
  });
  torch::manual_seed(12);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  const auto oa = run_tower(a, pixels, kMixed);
  const auto ob = run_tower(b, pixels, kMixed);
  ASSERT_EQ(oa.size(), 3u);
  ASSERT_EQ(ob.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_TRUE(at::equal(oa[k], ob[k])) << "output " << k;
  }
  EXPECT_GT(max_abs_diff(oa[1], oa[2]), 1e-3);
}

TEST(Qwen3VLTower, Qwen35HasNoDeepstackOutputs) {
  auto cfg = tiny_config(QwenFamily::kQwen3VL);
  cfg.model_type = "qwen3_5";
  cfg.as<Qwen3VLVisionConfig>().deepstack_visual_indexes.clear();
  const QwenVisionModel m = random_model(cfg, at::kFloat, 13);
  for (const auto& item : m.module->named_parameters()) {
    EXPECT_EQ(item.key().find("deepstack"), std::string::npos);
  }
  torch::manual_seed(14);
  const auto out = run_tower(m, random_pixels(cfg, kMixed, at::kFloat), kMixed);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].size(0), patch_rows(kMixed) / 4);
  EXPECT_EQ(out[0].size(1), 24);
}

TEST(Qwen2_5VLTower, WindowLayersDifferFromFullAttention) {
  // The same weights with every layer full-attention give other outputs:
  // windows are in effect (and frames larger than one window exist).
  auto cfg = tiny_config(QwenFamily::kQwen2_5VL);
  const QwenVisionModel win = random_model(cfg, at::kDouble, 15);
  cfg.as<Qwen2_5VLVisionConfig>().fullatt_block_indexes = {0, 1};
  const QwenVisionModel full = with_parameters_of(cfg, win);
  torch::manual_seed(16);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  EXPECT_GT(
      max_abs_diff(
          run_tower(win, pixels, kMixed)[0],
          run_tower(full, pixels, kMixed)[0]),
      1e-3);
  // A frame that fits in one window is the same either way.
  const std::vector<GridThw> small = {{1, 4, 4}};
  const at::Tensor p = pixels.narrow(0, 0, 16);
  EXPECT_LE(
      max_abs_diff(run_tower(win, p, small)[0], run_tower(full, p, small)[0]),
      1e-12);
}

}  // namespace
}  // namespace models
}  // namespace frameshard
