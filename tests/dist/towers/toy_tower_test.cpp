// The toy Qwen-style tower: shapes, per-frame independence, the position
// signal, dtypes, input checks, and sharded-vs-replicated parity through
// frameshard::encode (values and every parameter gradient, by the parity
// harness, src/parity/parity.h).
#include <frameshard/models/toy_tower.h>
#include <frameshard/runtime/encode.h>

#include "parity/parity.h"
#include "testing/parity_ranks.h"
#include "testing/tensors.h"
#include "testing/test_tower.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using models::ToyTower;
using models::ToyTowerOptions;

using testing::max_abs_diff;
using testing::patch_rows;

ToyTower make_tower(uint64_t seed, at::ScalarType dtype = at::kDouble) {
  torch::manual_seed(seed);
  ToyTower tower(ToyTowerOptions{});
  tower->to(dtype);
  return tower;
}

at::Tensor make_pixels(
    uint64_t seed,
    const std::vector<GridThw>& grid,
    at::ScalarType dtype = at::kDouble) {
  torch::manual_seed(seed);
  return torch::randn(
             {patch_rows(grid), ToyTowerOptions{}.in_features()},
             torch::kDouble)
      .to(dtype);
}

TEST(ToyTower, OutputShapesAndRegisteredParameters) {
  const std::vector<GridThw> grid{{1, 4, 6}, {2, 4, 4}, {1, 2, 2}};
  ToyTower tower = make_tower(0);
  auto outs = tower->forward(whole_frames_input(make_pixels(1, grid), grid));
  // tokens = (24 + 2*16 + 4) / 4 = 15
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].sizes(), (std::vector<int64_t>{15, 48}));
  EXPECT_EQ(outs[1].sizes(), (std::vector<int64_t>{15, 48}));
  EXPECT_EQ(outs[0].scalar_type(), at::kDouble);

  // embed (2) + depth 2 x 6 modules x 2 + two mergers x 3 modules x 2.
  EXPECT_EQ(tower->parameters().size(), 2u + 2 * 12 + 2 * 6);
  EXPECT_TRUE(has_trainable_parameters(*tower));

  // Every parameter takes part: all get a non-zero gradient.
  at::Tensor loss = outs[0].pow(2).sum() + outs[1].pow(2).sum();
  auto named = tower->named_parameters();
  std::vector<at::Tensor> params;
  for (const auto& p : named) {
    params.push_back(p.value());
  }
  auto grads = torch::autograd::grad({loss}, params);
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_GT(grads[i].abs().sum().item<double>(), 0.0) << named[i].key();
  }

  for (auto& p : tower->parameters()) {
    p.set_requires_grad(false);
  }
  EXPECT_FALSE(has_trainable_parameters(*tower));

  ToyTowerOptions no_ds;
  no_ds.deepstack = false;
  ToyTower plain(no_ds);
  plain->to(at::kDouble);
  auto one = plain->forward(whole_frames_input(make_pixels(1, grid), grid));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].sizes(), (std::vector<int64_t>{15, 48}));
}

TEST(ToyTower, VideoEqualsItsFramesEncodedSeparately) {
  ToyTower tower = make_tower(0);
  const std::vector<GridThw> video{{3, 4, 6}};
  const std::vector<GridThw> frames{{1, 4, 6}, {1, 4, 6}, {1, 4, 6}};
  at::Tensor pixels = make_pixels(2, video);
  auto a = tower->forward(whole_frames_input(pixels, video));
  auto b = tower->forward(whole_frames_input(pixels, frames));
  // And one frame at a time.
  std::vector<at::Tensor> emb, deep;
  for (int64_t f = 0; f < 3; ++f) {
    const std::vector<GridThw> one{{1, 4, 6}};
    auto o =
        tower->forward(whole_frames_input(pixels.narrow(0, 24 * f, 24), one));
    emb.push_back(o[0]);
    deep.push_back(o[1]);
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_LE(max_abs_diff(a[k], b[k]), 1e-12);
  }
  EXPECT_LE(max_abs_diff(a[0], torch::cat(emb)), 1e-12);
  EXPECT_LE(max_abs_diff(a[1], torch::cat(deep)), 1e-12);
}

TEST(ToyTower, AttentionStaysInsideEachFrame) {
  ToyTower tower = make_tower(0);
  // Frames of equal and of different sizes (batched and single segments).
  const std::vector<GridThw> grid{{2, 4, 4}, {1, 4, 6}, {1, 2, 2}};
  at::Tensor pixels = make_pixels(3, grid);
  auto before = tower->forward(whole_frames_input(pixels, grid));
  // Change the second frame of the video (patch rows 16..31, tokens 4..7).
  at::Tensor changed = pixels.clone();
  changed.narrow(0, 16, 16).add_(1.0);
  auto after = tower->forward(whole_frames_input(changed, grid));
  ASSERT_EQ(before[0].size(0), 15);
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(
        torch::equal(before[k].narrow(0, 0, 4), after[k].narrow(0, 0, 4)))
        << "output " << k << ": frame 0 changed";
    EXPECT_TRUE(
        torch::equal(before[k].narrow(0, 8, 7), after[k].narrow(0, 8, 7)))
        << "output " << k << ": later frames changed";
    EXPECT_GT(
        max_abs_diff(before[k].narrow(0, 4, 4), after[k].narrow(0, 4, 4)), 1e-6)
        << "output " << k << ": the changed frame did not change";
  }
}

TEST(ToyTower, PositionSignalDependsOnTheGrid) {
  ToyTower tower = make_tower(0);
  const std::vector<GridThw> grid{{1, 4, 8}};
  const std::vector<GridThw> transposed{{1, 8, 4}};
  at::Tensor pixels = make_pixels(4, grid);
  auto a = tower->forward(whole_frames_input(pixels, grid));
  auto b = tower->forward(whole_frames_input(pixels, transposed));
  EXPECT_EQ(a[0].sizes(), b[0].sizes());
  EXPECT_GT(max_abs_diff(a[0], b[0]), 1e-3);
  EXPECT_GT(max_abs_diff(a[1], b[1]), 1e-3);

  // Spatial only: every temporal index of a video gets the same signal, so
  // a video of identical frames gives identical tokens per frame.
  const std::vector<GridThw> video{{2, 4, 8}};
  at::Tensor twice = torch::cat({pixels, pixels});
  auto v = tower->forward(whole_frames_input(twice, video));
  EXPECT_TRUE(torch::equal(v[0].narrow(0, 0, 8), v[0].narrow(0, 8, 8)));
  EXPECT_LE(max_abs_diff(v[0].narrow(0, 0, 8), a[0]), 1e-12);
}

TEST(ToyTower, PositionsFollowTheMergeWindowRowOrder) {
  // With the attention output projections zeroed, every row evolves on its
  // own (x + MLP(x)), so token k depends only on rows 4k..4k+3 and their
  // (y, x) coordinates. In the processor's merge-window order, rows 0..3 of
  // a (1, 2, 4) frame are the window at (0..1, 0..1), exactly the rows of a
  // (1, 2, 2) frame; in raster order they would be (0, 0..3).
  ToyTower tower = make_tower(0);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : tower->named_parameters()) {
      if (p.key().find("_proj.") != std::string::npos) {
        p.value().zero_();
      }
    }
  }
  const std::vector<GridThw> wide{{1, 2, 4}};
  const std::vector<GridThw> window{{1, 2, 2}};
  at::Tensor pixels = make_pixels(5, wide);
  auto a = tower->forward(whole_frames_input(pixels, wide));
  auto b = tower->forward(whole_frames_input(pixels.narrow(0, 0, 4), window));
  EXPECT_LE(max_abs_diff(a[0][0], b[0][0]), 1e-12);
  // The second window sits at x = 2..3: same pixels at (0..1, 0..1) give a
  // different token.
  auto c = tower->forward(whole_frames_input(pixels.narrow(0, 4, 4), window));
  EXPECT_GT(max_abs_diff(a[0][1], c[0][0]), 1e-6);

  // Block-row order: token 2 of a (1, 4, 4) frame is the window at rows
  // 2..3, columns 0..1, which is token 1 of a (1, 4, 2) frame.
  const std::vector<GridThw> square{{1, 4, 4}};
  const std::vector<GridThw> tall{{1, 4, 2}};
  at::Tensor sq = make_pixels(6, square);
  at::Tensor tl = torch::cat({sq.narrow(0, 0, 4), sq.narrow(0, 8, 4)});
  auto d = tower->forward(whole_frames_input(sq, square));
  auto e = tower->forward(whole_frames_input(tl, tall));
  EXPECT_LE(max_abs_diff(d[0][0], e[0][0]), 1e-12);
  EXPECT_LE(max_abs_diff(d[0][2], e[0][1]), 1e-12);
  EXPECT_LE(max_abs_diff(d[1][2], e[1][1]), 1e-12);
}

TEST(ToyTower, RunsInEveryDtype) {
  const std::vector<GridThw> grid{{2, 4, 4}, {1, 2, 6}};
  ToyTower ref = make_tower(0, at::kDouble);
  at::Tensor pixels = make_pixels(6, grid);
  auto expected = ref->forward(whole_frames_input(pixels, grid));
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    ToyTower tower = make_tower(0, dtype);
    auto outs = tower->forward(whole_frames_input(pixels.to(dtype), grid));
    ASSERT_EQ(outs.size(), 2u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(outs[k].scalar_type(), dtype);
      EXPECT_TRUE(torch::isfinite(outs[k]).all().item<bool>());
      const double bound = dtype == at::kFloat ? 1e-4 : 0.1;
      const double scale = expected[k].abs().max().item<double>();
      EXPECT_LE(max_abs_diff(outs[k], expected[k]), bound * scale)
          << c10::toString(dtype);
    }
  }
}

TEST(ToyTower, RejectsInconsistentInputs) {
  ToyTower tower = make_tower(0);
  const std::vector<GridThw> grid{{2, 4, 4}};
  at::Tensor pixels = make_pixels(7, grid);
  TowerInput in = whole_frames_input(pixels, grid);

  TowerInput short_rows = in;
  short_rows.pixel_values = pixels.narrow(0, 0, 16);
  EXPECT_THROW(tower->forward(short_rows), c10::Error);

  TowerInput bad_cu = in;
  bad_cu.cu_seqlens =
      torch::tensor(std::vector<int32_t>{0, 12, 32}, torch::kInt);
  try {
    tower->forward(bad_cu);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace()).find("cu_seqlens segment 0"),
        std::string::npos)
        << e.what_without_backtrace();
  }

  TowerInput bad_features = in;
  bad_features.pixel_values = torch::zeros({32, 5}, torch::kDouble);
  EXPECT_THROW(tower->forward(bad_features), c10::Error);

  TowerInput odd_grid = in;
  odd_grid.grid_thw = grid_to_tensor({{2, 4, 3}});
  EXPECT_THROW(tower->forward(odd_grid), c10::Error);

  ToyTowerOptions bad;
  bad.hidden = 30;
  EXPECT_THROW(ToyTower{bad}, c10::Error);
  bad = ToyTowerOptions{};
  bad.deepstack_layer = 2;
  EXPECT_THROW(ToyTower{bad}, c10::Error);
}

// ------------------------------------------------ sharded vs replicated

struct ParityCase {
  std::vector<GridThw> grid;
  int world = 2;
  Partitioner partitioner = Partitioner::kOptimal;
  int64_t min_local_patch_rows = 96;
};

// Rank q's loss uses rows i % world == q of each output with rank-specific
// weights, as under sequence CP; a backward that kept only a rank's own rows'
// gradient would not match (the slice-only control shows it).
void check_parity(const ParityCase& c) {
  parity::ParitySpec spec;
  spec.grid = c.grid;
  spec.plan = testing::always_shard(c.world);
  spec.plan.partitioner = c.partitioner;
  spec.plan.min_local_patch_rows = c.min_local_patch_rows;
  spec.in_features = ToyTowerOptions{}.in_features();
  spec.seed = 10;
  const testing::ParityRun run =
      testing::run_parity(spec, [](at::ScalarType dtype) {
        ToyTower tower(ToyTowerOptions{});
        tower->to(dtype);
        return parity::module_instance(
            models::as_vision_tower(tower), tower.ptr());
      });
  const parity::ParityReport& rep = run.report;

  ASSERT_TRUE(rep.plan.sharded()) << rep.plan.reason;
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(run.ranks[r].encode.plan.fingerprint, rep.plan.fingerprint);
    ASSERT_EQ(run.ranks[r].encode.outputs.size(), 2u) << "rank " << r;
  }
  // Every rank's outputs (the max over ranks) and every parameter gradient
  // (summed over ranks) against the replicated reference.
  ASSERT_EQ(rep.outputs.size(), 2u);
  for (const auto& d : rep.outputs) {
    EXPECT_LE(d.max_abs_diff, 1e-12) << d.name;
  }
  EXPECT_EQ(
      rep.gradients.size(), ToyTower(ToyTowerOptions{})->parameters().size());
  for (const auto& d : rep.gradients) {
    EXPECT_LE(d.max_abs_diff, 1e-12) << d.name;
  }
  ASSERT_TRUE(rep.slice_only_diff.has_value());
  EXPECT_GT(*rep.slice_only_diff, 1e-3) << "the losses must discriminate";
}

TEST(ToyTowerParity, MixedImagesAndVideosMatchOverTwoRanks) {
  check_parity({{{1, 4, 6}, {2, 4, 4}, {1, 2, 2}, {3, 2, 4}, {1, 8, 4}}, 2});
}

TEST(ToyTowerParity, MixedImagesAndVideosMatchOverThreeRanksWithFloorPadding) {
  ParityCase c{{{1, 4, 6}, {2, 4, 4}, {1, 2, 2}, {3, 2, 4}, {1, 8, 4}}, 3};
  c.min_local_patch_rows = 48;
  check_parity(c);
}

TEST(ToyTowerParity, LptPermutationMatchesOverThreeRanks) {
  ParityCase c{{{1, 8, 8}, {1, 2, 2}, {4, 4, 4}, {1, 6, 2}, {1, 4, 8}}, 3};
  c.partitioner = Partitioner::kLpt;
  c.min_local_patch_rows = 0;
  check_parity(c);
}

TEST(ToyTowerParity, FewerFramesThanRanksMatchOverThreeRanks) {
  check_parity({{{1, 4, 6}}, 3});
}

}  // namespace
}  // namespace frameshard
