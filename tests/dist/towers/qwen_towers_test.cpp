// Qwen-VL-family vision towers (frameshard/models/qwen_vision.h) sharded
// over ranks: per family, float64, sharded vs replicated parity through
// frameshard::encode over 2 and 3 ranks, outputs AND every parameter
// gradient, with rank-specific losses on different row subsets (a
// slice-only backward is shown to fail the bound), DeepStack outputs
// travelling in the one fused gather; fewer frames than ranks.
// The rank-free tower tests (safetensors, config.json, weight loading,
// frame independence, family specifics) are the unit tier's
// tests/models/*. Numerical parity with `transformers` itself is the
// Python fixture test's job (it runs `frameshard encode` on HF-saved tiny
// models). Split frames (a frame cut across ranks, keys and values
// exchanged in every full-attention layer): one frame over 2-4 ranks, next
// to whole frames, a video frame, float32, routed to the tokens' owners
// (every family but RADIO, whose whole-frame tests run here too).
// bfloat16 against verify's rule (a float64 run from the same rounded
// values). The same checks on CUDA tensors (CudaRanksQwen, skipped without
// a GPU; scripts/gpu-check.sh runs them): every rank on its GPU with NCCL,
// or all on GPU 0 over Gloo; the reference stays on the CPU.

#include <frameshard/models/cost_bridge.h>
#include <frameshard/models/qwen_vision.h>
#include <frameshard/runtime/encode.h>

#include "testing/parity_ranks.h"
#include "testing/qwen_fixtures.h"
#include "testing/test_tower.h"
#include "testing/token_owners.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using testing::family_name;
using testing::kMixed;
using testing::patch_rows;
using testing::QwenFamilyTest;
using testing::random_model;
using testing::sci;
using testing::tiny_config;

struct ParityResult {
  parity::ParityReport report;
  std::vector<int> alltoalls_forward;
  std::vector<int64_t> rows_seen;
  std::vector<std::vector<int64_t>> tokens;  // each rank's received tokens
};

// The parity harness (src/parity) on a random float64 tower of `cfg` over
// `world` ranks: every rank's outputs and the parameter gradients summed over
// ranks against the replicated tower, rank-specific losses on different rows
// (rows i % world == r), and the slice-only control. Also counts each rank's
// forward all-to-alls (DeepStack must travel in the same one).
struct RunOptions {
  bool split = false;  // plan with split frames (pieces on window rows)
  at::ScalarType dtype = at::kDouble;
  // Each rank receives only the tokens its (load-balanced) sequence shard
  // holds (frameshard/owner_route.h) instead of the gather's every row;
  // rank q's loss then uses exactly those.
  bool route_to_owner = false;
  // The ranks' towers and pixels on CUDA (testing::cuda_rank_device).
  bool cuda = false;
};

ParityResult sharded_parity(
    const QwenVisionConfig& cfg,
    const std::vector<GridThw>& grid,
    int world,
    uint64_t seed,
    const RunOptions& opt = {}) {
  parity::ParitySpec spec;
  spec.grid = grid;
  spec.plan = frameshard::testing::always_shard(world);
  spec.plan.layout = media_layout(cfg);
  spec.plan.cost = flop_cost_model(tower_dims(cfg));
  spec.plan.split.enabled = opt.split;
  spec.plan.split.window_side = split_window_side(cfg);
  // Tiny widths: a row's compute is a few hundred cost units, below the
  // default exchange cost of a bf16 row at realistic widths.
  spec.plan.split.exchange_row_cost = 1.0;
  spec.dtype = opt.dtype;
  // bfloat16: also a float64 run from the same rounded values (the rule of
  // within_bf16_rule below).
  spec.exact_reference = opt.dtype == at::kBFloat16;
  if (opt.route_to_owner) {
    spec.token_owner = frameshard::testing::spread_token_owners(
        expand_frames(grid, spec.plan.layout).total_tokens,
        world,
        SequenceSplit::kLoadBalanced);
    spec.route_to_owner = true;
  }
  spec.in_features = cfg.in_features();
  spec.seed = seed;
  spec.normalize_weights = true;
  ParityResult res;
  res.alltoalls_forward.assign(world, -1);
  auto customize = [&](int rank,
                       const ProcessGroupPtr& pg,
                       parity::RankOptions& o) {
    auto counting = c10::make_intrusive<frameshard::testing::CountingGroup>(pg);
    o.encode_group = counting;
    if (opt.cuda) {
      o.device = frameshard::testing::cuda_rank_device(rank, world);
    }
    o.after_encode = [&res, rank, counting] {
      res.alltoalls_forward[rank] = counting->alltoalls;
    };
  };
  const auto run = frameshard::testing::run_parity(
      spec,
      [&](at::ScalarType dtype) {
        const QwenVisionModel m = random_model(cfg, dtype, seed);
        return parity::module_instance(m.tower, m.module);
      },
      customize,
      opt.cuda ? frameshard::testing::cuda_rank_options()
               : frameshard::testing::RunRanksOptions{});
  res.report = run.report;
  for (const auto& r : run.ranks) {
    res.rows_seen.push_back(r.figures.tower_rows);
    res.tokens.push_back(r.encode.tokens);
  }
  return res;
}

TEST_P(QwenFamilyTest, ShardedMatchesReplicatedFloat64) {
  const auto cfg = tiny_config(GetParam());
  for (int world : {2, 3}) {
    const auto r = sharded_parity(cfg, kMixed, world, 20 + world);
    const parity::ParityReport& rep = r.report;
    ASSERT_TRUE(rep.plan.sharded());
    ASSERT_TRUE(rep.slice_only_diff.has_value());
    // Gradients are O(1) (loss weights scaled by 1/sqrt(tokens)); the bound
    // is relative to their scale.
    const double tol = 1e-12 * std::max(1.0, rep.gradient_scale());
    RecordProperty(
        "world" + std::to_string(world),
        "out " + sci(rep.max_output_diff()) + " grad " +
            sci(rep.max_gradient_diff()) + " scale " +
            sci(rep.gradient_scale()) + " slice_only " +
            sci(*rep.slice_only_diff));
    EXPECT_LE(rep.max_output_diff(), 1e-12) << "world " << world;
    EXPECT_LE(rep.max_gradient_diff(), tol) << "world " << world;
    EXPECT_GT(*rep.slice_only_diff, 1e-3) << "the losses must discriminate";
    int64_t seen = 0;
    for (int rank = 0; rank < world; ++rank) {
      // Every output (DeepStack included) travels in ONE forward gather.
      EXPECT_EQ(r.alltoalls_forward[rank], 1) << "rank " << rank;
      EXPECT_GT(r.rows_seen[rank], 0);
      seen += r.rows_seen[rank];
    }
    EXPECT_GE(seen, patch_rows(kMixed)) << "every frame encoded somewhere";
  }
}

TEST_P(QwenFamilyTest, FewerFramesThanRanksUseDummyFrames) {
  const auto cfg = tiny_config(GetParam());
  const auto r = sharded_parity(cfg, {{1, 4, 4}, {1, 2, 2}}, 3, 30);
  const parity::ParityReport& rep = r.report;
  ASSERT_TRUE(rep.plan.sharded());
  EXPECT_LE(rep.max_output_diff(), 1e-12);
  EXPECT_LE(
      rep.max_gradient_diff(), 1e-12 * std::max(1.0, rep.gradient_scale()));
  EXPECT_EQ(r.rows_seen[2], 4) << "one (1, 2, 2) dummy frame";
}

// ---------------------------------------------------------- split frames

// The families whose towers take pieces of split frames (all but RADIO,
// whose prefix tokens and pixel shuffle keep a frame whole).
class PieceFamilyTest : public QwenFamilyTest {};

// Full-attention layers of the tiny config: the exchanges per forward.
int64_t full_attention_layers(const QwenVisionConfig& cfg) {
  const TowerDims d = tower_dims(cfg);
  return d.window_patches > 0 ? d.full_layers() : d.depth;
}

// Split-frame parity: the plan split some frame, outputs and every parameter
// gradient equal the replicated tower's (float64 1e-12, relative to the
// gradients' scale), every rank ran the tower on rows, and each rank issued
// one all-to-all per full-attention layer (the exchange; window layers stay
// local) plus the gather's.
void expect_split_parity(
    const QwenVisionConfig& cfg,
    const std::vector<GridThw>& grid,
    int world,
    uint64_t seed) {
  const auto r = sharded_parity(cfg, grid, world, seed, {/*split=*/true});
  const parity::ParityReport& rep = r.report;
  ASSERT_TRUE(rep.plan.sharded());
  ASSERT_TRUE(rep.plan.split) << "world " << world << ": nothing was split";
  EXPECT_LT(rep.plan.partition.max_cost(), rep.plan.unsplit_max_cost);
  EXPECT_LE(rep.max_output_diff(), 1e-12) << "world " << world;
  EXPECT_LE(
      rep.max_gradient_diff(), 1e-12 * std::max(1.0, rep.gradient_scale()))
      << "world " << world;
  ASSERT_TRUE(rep.slice_only_diff.has_value());
  EXPECT_GT(*rep.slice_only_diff, 1e-3) << "the losses must discriminate";
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(r.alltoalls_forward[rank], 1 + full_attention_layers(cfg))
        << "rank " << rank;
    EXPECT_GT(r.rows_seen[rank], 0) << "rank " << rank;
  }
}

TEST_P(PieceFamilyTest, OneFrameSplitOverAllRanksMatchesReplicated) {
  const auto cfg = tiny_config(GetParam());
  for (int world : {2, 3, 4}) {
    expect_split_parity(cfg, {{1, 16, 16}}, world, 40 + world);
  }
}

TEST_P(PieceFamilyTest, SplitFrameNextToWholeFramesMatchesReplicated) {
  const auto cfg = tiny_config(GetParam());
  expect_split_parity(
      cfg, {{1, 4, 4}, {1, 24, 16}, {2, 4, 4}, {1, 8, 4}}, 3, 50);
}

TEST_P(PieceFamilyTest, VideoFrameSplitMatchesReplicated) {
  const auto cfg = tiny_config(GetParam());
  // Two frames of 256 rows over three ranks: one frame is cut.
  expect_split_parity(cfg, {{2, 16, 16}}, 3, 60);
}

TEST_P(PieceFamilyTest, SplitFramesFloat32WithinBound) {
  const auto cfg = tiny_config(GetParam());
  const auto r = sharded_parity(
      cfg, {{1, 16, 16}, {1, 4, 4}}, 2, 70, {/*split=*/true, at::kFloat});
  ASSERT_TRUE(r.report.plan.split);
  EXPECT_LE(r.report.max_output_diff(), 1e-5);
  EXPECT_LE(
      r.report.max_gradient_diff(),
      1e-5 * std::max(1.0, r.report.gradient_scale()));
}

// Owner routing with a split frame: each rank receives only the tokens its
// sequence shard holds, some of them encoded as pieces on other ranks, and
// outputs and gradients still equal the replicated tower's. The owner
// all-to-all replaces the gather (one per forward, plus the exchanges).
TEST_P(PieceFamilyTest, SplitFramesRoutedToOwnersMatchReplicated) {
  const auto cfg = tiny_config(GetParam());
  const std::vector<GridThw> grid = {{1, 4, 4}, {1, 24, 16}, {1, 8, 4}};
  const int world = 3;
  RunOptions opt;
  opt.split = true;
  opt.route_to_owner = true;
  const auto r = sharded_parity(cfg, grid, world, 80, opt);
  const parity::ParityReport& rep = r.report;
  ASSERT_TRUE(rep.plan.split) << "nothing was split";
  EXPECT_LE(rep.max_output_diff(), 1e-12);
  EXPECT_LE(
      rep.max_gradient_diff(), 1e-12 * std::max(1.0, rep.gradient_scale()));
  ASSERT_TRUE(rep.slice_only_diff.has_value());
  EXPECT_GT(*rep.slice_only_diff, 1e-3) << "the losses must discriminate";
  const auto owner = frameshard::testing::spread_token_owners(
      rep.plan.frames.total_tokens, world, SequenceSplit::kLoadBalanced);
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(r.tokens[rank], frameshard::testing::tokens_owned_by(owner, rank))
        << "rank " << rank;
    EXPECT_EQ(r.alltoalls_forward[rank], 1 + full_attention_layers(cfg))
        << "rank " << rank;
  }
}

// CP 8 (the seed's second document: nothing covered it): Qwen3-VL, whose
// DeepStack outputs travel with the last layer's, in float64 over eight
// thread ranks -- whole frames (more ranks than some batches have frames:
// dummies), then a page split over all eight ranks next to whole frames.
TEST(QwenCp8, EightRanksMatchReplicatedFloat64WholeAndSplit) {
  const auto cfg = tiny_config(QwenFamily::kQwen3VL);
  const auto whole = sharded_parity(cfg, kMixed, 8, 80);
  ASSERT_TRUE(whole.report.plan.sharded());
  EXPECT_LE(whole.report.max_output_diff(), 1e-12);
  EXPECT_LE(
      whole.report.max_gradient_diff(),
      1e-12 * std::max(1.0, whole.report.gradient_scale()));
  ASSERT_TRUE(whole.report.slice_only_diff.has_value());
  EXPECT_GT(*whole.report.slice_only_diff, 1e-3);
  expect_split_parity(cfg, {{1, 4, 4}, {1, 32, 16}, {2, 4, 4}}, 8, 81);
}

// ------------------------------------------------------------- bfloat16

// `frameshard verify`'s bfloat16 rule (TensorDiff::bf16_bound), per output
// and parameter gradient, with a float64 exact run behind every bound.
void expect_within_bf16_rule(const parity::ParityReport& rep) {
  auto check = [](const std::vector<parity::TensorDiff>& diffs) {
    for (const parity::TensorDiff& d : diffs) {
      EXPECT_GT(d.norm_exact, 0.0) << d.name << ": no exact run";
      EXPECT_LE(d.norm_diff, d.bf16_bound())
          << d.name << ": ||diff|| " << d.norm_diff << ", ||ref - exact|| "
          << d.norm_ref_error << ", ||exact|| " << d.norm_exact;
    }
  };
  check(rep.outputs);
  check(rep.gradients);
}

TEST_P(PieceFamilyTest, BFloat16WholeAndSplitFramesWithinTheBf16Rule) {
  const auto cfg = tiny_config(GetParam());
  RunOptions opt;
  opt.dtype = at::kBFloat16;
  expect_within_bf16_rule(sharded_parity(cfg, kMixed, 2, 90, opt).report);
  opt.split = true;
  const auto r = sharded_parity(cfg, {{1, 24, 16}, {1, 4, 4}}, 3, 91, opt);
  ASSERT_TRUE(r.report.plan.split) << "nothing was split";
  expect_within_bf16_rule(r.report);
}

// ----------------------------------------------------------------- CUDA

class CudaRanksQwen : public QwenFamilyTest {};

// Cross-device float64 (other kernels, other reduction orders): 1e-10, not
// the 1e-12 of CPU against CPU.
void expect_cuda_parity(const ParityResult& r, const char* what) {
  const parity::ParityReport& rep = r.report;
  ASSERT_TRUE(rep.plan.sharded()) << what;
  EXPECT_LE(rep.max_output_diff(), 1e-10) << what;
  EXPECT_LE(
      rep.max_gradient_diff(), 1e-10 * std::max(1.0, rep.gradient_scale()))
      << what;
  ASSERT_TRUE(rep.slice_only_diff.has_value()) << what;
  EXPECT_GT(*rep.slice_only_diff, 1e-3) << what << ": losses must discriminate";
}

TEST_P(CudaRanksQwen, WholeSplitAndOwnerRoutedFramesMatchReplicatedFloat64) {
  FRAMESHARD_REQUIRE_CUDA();
  const auto cfg = tiny_config(GetParam());
  RunOptions opt;
  opt.cuda = true;
  expect_cuda_parity(sharded_parity(cfg, kMixed, 2, 100, opt), "whole");
  opt.split = true;
  const std::vector<GridThw> grid = {{1, 4, 4}, {1, 24, 16}, {1, 8, 4}};
  const auto split = sharded_parity(cfg, grid, 3, 101, opt);
  ASSERT_TRUE(split.report.plan.split) << "nothing was split";
  expect_cuda_parity(split, "split");
  opt.route_to_owner = true;
  expect_cuda_parity(sharded_parity(cfg, grid, 3, 102, opt), "owner");
}

TEST_P(CudaRanksQwen, BFloat16AndFloat32OnCudaWithinTheirBounds) {
  FRAMESHARD_REQUIRE_CUDA();
  const auto cfg = tiny_config(GetParam());
  RunOptions opt;
  opt.cuda = true;
  opt.split = true;
  opt.dtype = at::kBFloat16;
  const std::vector<GridThw> grid = {{1, 24, 16}, {1, 4, 4}};
  const auto bf16 = sharded_parity(cfg, grid, 3, 103, opt);
  ASSERT_TRUE(bf16.report.plan.split) << "nothing was split";
  expect_within_bf16_rule(bf16.report);
  opt.dtype = at::kFloat;
  const auto f32 = sharded_parity(cfg, grid, 3, 104, opt);
  EXPECT_LE(f32.report.max_output_diff(), 1e-5);
  EXPECT_LE(
      f32.report.max_gradient_diff(),
      1e-5 * std::max(1.0, f32.report.gradient_scale()));
}

INSTANTIATE_TEST_SUITE_P(
    Families,
    QwenFamilyTest,
    ::testing::Values(
        QwenFamily::kQwen2VL,
        QwenFamily::kQwen2_5VL,
        QwenFamily::kQwen3VL,
        QwenFamily::kRadio),
    family_name);
INSTANTIATE_TEST_SUITE_P(
    Families,
    PieceFamilyTest,
    ::testing::Values(
        QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL),
    family_name);
INSTANTIATE_TEST_SUITE_P(
    Families,
    CudaRanksQwen,
    ::testing::Values(
        QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL),
    family_name);

}  // namespace
}  // namespace models
}  // namespace frameshard
