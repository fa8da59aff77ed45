// The toy Qwen-style tower: shapes, per-frame independence, the position
// signal, dtypes, input checks, and sharded-vs-replicated parity through
// frameshard::encode (values and every parameter gradient).
#include <frameshard/models/toy_tower.h>
#include <frameshard/runtime/encode.h>

#include "testing/run_ranks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using models::ToyTower;
using models::ToyTowerOptions;

at::Tensor grid_tensor(const std::vector<GridThw>& grid) {
  std::vector<int64_t> flat;
  for (const auto& g : grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  return torch::tensor(flat, torch::kLong)
      .view({static_cast<int64_t>(grid.size()), 3});
}

TowerInput full_input(
    const at::Tensor& pixels, const std::vector<GridThw>& grid) {
  std::vector<int32_t> cu{0};
  for (const auto& g : grid) {
    for (int64_t k = 0; k < g.t; ++k) {
      cu.push_back(cu.back() + static_cast<int32_t>(g.h * g.w));
    }
  }
  return {pixels, grid_tensor(grid), torch::tensor(cu, torch::kInt)};
}

int64_t patch_rows(const std::vector<GridThw>& grid) {
  int64_t n = 0;
  for (const auto& g : grid) {
    n += g.patches();
  }
  return n;
}

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

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble))
      .abs()
      .max()
      .item<double>();
}

TEST(ToyTower, OutputShapesAndRegisteredParameters) {
  const std::vector<GridThw> grid{{1, 4, 6}, {2, 4, 4}, {1, 2, 2}};
  ToyTower tower = make_tower(0);
  auto outs = tower->forward(full_input(make_pixels(1, grid), grid));
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
  auto one = plain->forward(full_input(make_pixels(1, grid), grid));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].sizes(), (std::vector<int64_t>{15, 48}));
}

TEST(ToyTower, VideoEqualsItsFramesEncodedSeparately) {
  ToyTower tower = make_tower(0);
  const std::vector<GridThw> video{{3, 4, 6}};
  const std::vector<GridThw> frames{{1, 4, 6}, {1, 4, 6}, {1, 4, 6}};
  at::Tensor pixels = make_pixels(2, video);
  auto a = tower->forward(full_input(pixels, video));
  auto b = tower->forward(full_input(pixels, frames));
  // And one frame at a time.
  std::vector<at::Tensor> emb, deep;
  for (int64_t f = 0; f < 3; ++f) {
    const std::vector<GridThw> one{{1, 4, 6}};
    auto o = tower->forward(full_input(pixels.narrow(0, 24 * f, 24), one));
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
  auto before = tower->forward(full_input(pixels, grid));
  // Change the second frame of the video (patch rows 16..31, tokens 4..7).
  at::Tensor changed = pixels.clone();
  changed.narrow(0, 16, 16).add_(1.0);
  auto after = tower->forward(full_input(changed, grid));
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
  auto a = tower->forward(full_input(pixels, grid));
  auto b = tower->forward(full_input(pixels, transposed));
  EXPECT_EQ(a[0].sizes(), b[0].sizes());
  EXPECT_GT(max_abs_diff(a[0], b[0]), 1e-3);
  EXPECT_GT(max_abs_diff(a[1], b[1]), 1e-3);

  // Spatial only: every temporal index of a video gets the same signal, so
  // a video of identical frames gives identical tokens per frame.
  const std::vector<GridThw> video{{2, 4, 8}};
  at::Tensor twice = torch::cat({pixels, pixels});
  auto v = tower->forward(full_input(twice, video));
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
  auto a = tower->forward(full_input(pixels, wide));
  auto b = tower->forward(full_input(pixels.narrow(0, 0, 4), window));
  EXPECT_LE(max_abs_diff(a[0][0], b[0][0]), 1e-12);
  // The second window sits at x = 2..3: same pixels at (0..1, 0..1) give a
  // different token.
  auto c = tower->forward(full_input(pixels.narrow(0, 4, 4), window));
  EXPECT_GT(max_abs_diff(a[0][1], c[0][0]), 1e-6);

  // Block-row order: token 2 of a (1, 4, 4) frame is the window at rows
  // 2..3, columns 0..1, which is token 1 of a (1, 4, 2) frame.
  const std::vector<GridThw> square{{1, 4, 4}};
  const std::vector<GridThw> tall{{1, 4, 2}};
  at::Tensor sq = make_pixels(6, square);
  at::Tensor tl = torch::cat({sq.narrow(0, 0, 4), sq.narrow(0, 8, 4)});
  auto d = tower->forward(full_input(sq, square));
  auto e = tower->forward(full_input(tl, tall));
  EXPECT_LE(max_abs_diff(d[0][0], e[0][0]), 1e-12);
  EXPECT_LE(max_abs_diff(d[0][2], e[0][1]), 1e-12);
  EXPECT_LE(max_abs_diff(d[1][2], e[1][1]), 1e-12);
}

TEST(ToyTower, RunsInEveryDtype) {
  const std::vector<GridThw> grid{{2, 4, 4}, {1, 2, 6}};
  ToyTower ref = make_tower(0, at::kDouble);
  at::Tensor pixels = make_pixels(6, grid);
  auto expected = ref->forward(full_input(pixels, grid));
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    ToyTower tower = make_tower(0, dtype);
    auto outs = tower->forward(full_input(pixels.to(dtype), grid));
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
  TowerInput in = full_input(pixels, grid);

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
  odd_grid.grid_thw = grid_tensor({{2, 4, 3}});
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

// Rank q's loss: rows i % world == q of each output with rank-specific
// weights, as under sequence CP; a backward that kept only a rank's own
// rows' gradient would not match.
at::Tensor rank_loss(
    const std::vector<at::Tensor>& outs,
    const std::vector<std::vector<at::Tensor>>& weights,
    int q,
    int world) {
  at::Tensor loss = torch::zeros({}, torch::kDouble);
  for (size_t k = 0; k < outs.size(); ++k) {
    at::Tensor rows = torch::arange(q, outs[k].size(0), world);
    loss = loss + (outs[k].index_select(0, rows) * weights[q][k]).sum();
  }
  return loss;
}

void check_parity(const ParityCase& c) {
  const int world = c.world;
  const at::Tensor pixels = make_pixels(11, c.grid);
  const at::Tensor grid = grid_tensor(c.grid);
  const int64_t tokens = patch_rows(c.grid) / 4;
  torch::manual_seed(12);
  std::vector<std::vector<at::Tensor>> weights(world);
  for (int q = 0; q < world; ++q) {
    const int64_t mine = std::max<int64_t>((tokens - q + world - 1) / world, 0);
    for (int k = 0; k < 2; ++k) {
      weights[q].push_back(torch::randn({mine, 48}, torch::kDouble));
    }
  }

  // Reference: the replicated tower, loss = sum over ranks of rank losses.
  ToyTower ref = make_tower(10);
  auto ref_outs = ref->forward(full_input(pixels, c.grid));
  at::Tensor ref_loss = torch::zeros({}, torch::kDouble);
  for (int q = 0; q < world; ++q) {
    ref_loss = ref_loss + rank_loss(ref_outs, weights, q, world);
  }
  auto ref_grads = torch::autograd::grad({ref_loss}, ref->parameters());

  // One tower per rank (same seed), built here: the RNG is process-wide.
  std::vector<ToyTower> towers;
  for (int r = 0; r < world; ++r) {
    towers.push_back(make_tower(10));
  }
  std::vector<std::vector<at::Tensor>> outs(world), grads(world);
  std::vector<ShardPlan> plans(world);
  testing::run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    EncodeOptions o;
    o.plan.world = world;
    o.plan.partitioner = c.partitioner;
    o.plan.min_local_patch_rows = c.min_local_patch_rows;
    o.plan.policy.enabled = true;
    o.plan.policy.min_tokens = 0;
    o.plan.policy.min_frames = 0;
    o.tower_trainable = has_trainable_parameters(*towers[rank]);
    auto res =
        encode(models::as_vision_tower(towers[rank]), pixels, grid, pg, o);
    at::Tensor loss = rank_loss(res.outputs, weights, rank, world);
    grads[rank] = torch::autograd::grad({loss}, towers[rank]->parameters());
    outs[rank] = res.outputs;
    plans[rank] = res.plan;
  });

  ASSERT_TRUE(plans[0].sharded()) << plans[0].reason;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(plans[r].fingerprint, plans[0].fingerprint);
    ASSERT_EQ(outs[r].size(), 2u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_LE(max_abs_diff(outs[r][k], ref_outs[k]), 1e-12)
          << "rank " << r << " output " << k;
    }
  }
  auto names = ref->named_parameters().keys();
  for (size_t i = 0; i < ref_grads.size(); ++i) {
    at::Tensor sum = torch::zeros_like(ref_grads[i]);
    for (int r = 0; r < world; ++r) {
      sum = sum + grads[r][i];
    }
    EXPECT_LE(max_abs_diff(sum, ref_grads[i]), 1e-12) << names[i];
  }
}

TEST(ToyTowerParity, MixedImagesAndVideosWorld2) {
  check_parity({{{1, 4, 6}, {2, 4, 4}, {1, 2, 2}, {3, 2, 4}, {1, 8, 4}}, 2});
}

TEST(ToyTowerParity, MixedImagesAndVideosWorld3WithFloorPadding) {
  ParityCase c{{{1, 4, 6}, {2, 4, 4}, {1, 2, 2}, {3, 2, 4}, {1, 8, 4}}, 3};
  c.min_local_patch_rows = 48;
  check_parity(c);
}

TEST(ToyTowerParity, LptPermutationWorld3) {
  ParityCase c{{{1, 8, 8}, {1, 2, 2}, {4, 4, 4}, {1, 6, 2}, {1, 4, 8}}, 3};
  c.partitioner = Partitioner::kLpt;
  c.min_local_patch_rows = 0;
  check_parity(c);
}

TEST(ToyTowerParity, FewerFramesThanRanksWorld3) {
  check_parity({{{1, 4, 6}}, 3});
}

}  // namespace
}  // namespace frameshard
