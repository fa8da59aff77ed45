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
// models).

#include <frameshard/models/qwen_vision.h>
#include <frameshard/runtime/encode.h>

#include "testing/qwen_fixtures.h"
#include "testing/run_ranks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using frameshard::testing::run_ranks;
using testing::clone_model;
using testing::family_name;
using testing::grid_tensor;
using testing::kMixed;
using testing::max_abs_diff;
using testing::patch_rows;
using testing::QwenFamilyTest;
using testing::random_model;
using testing::random_pixels;
using testing::run_tower;
using testing::sci;
using testing::tiny_config;

struct ParityResult {
  double out_diff = 0.0;
  double grad_diff = 0.0;
  double grad_scale = 0.0;
  double slice_only_diff = 0.0;
  bool sharded = false;
  std::vector<int> alltoalls_forward;
  std::vector<int64_t> rows_seen;
};

// Sharded (frameshard::encode over `world` ranks) vs replicated (the tower
// on everything), float64: outputs on every rank and parameter gradients
// summed over ranks. Rank r's loss: rows i % world == r of every output
// with rank-specific random weights (a sequence shard, as under CP).
ParityResult sharded_parity(
    const QwenVisionConfig& cfg,
    const std::vector<GridThw>& grid,
    int world,
    uint64_t seed) {
  const QwenVisionModel ref = random_model(cfg, at::kDouble, seed);
  torch::manual_seed(seed + 100);
  const at::Tensor pixels = random_pixels(cfg, grid, at::kDouble);
  const auto ref_outs = run_tower(ref, pixels, grid);
  const int64_t total = ref_outs[0].size(0);
  const double wscale = 1.0 / std::sqrt(static_cast<double>(total));
  std::vector<std::vector<at::Tensor>> weights(world);
  std::vector<at::Tensor> masks;
  for (int r = 0; r < world; ++r) {
    for (const auto& o : ref_outs) {
      weights[r].push_back(at::randn(o.sizes(), at::kDouble) * wscale);
    }
    at::Tensor mask = at::zeros({total, 1}, at::kDouble);
    for (int64_t i = r; i < total; i += world) {
      mask[i] = 1.0;
    }
    masks.push_back(mask);
  }
  auto rank_loss =
      [&](int r, const std::vector<at::Tensor>& outs, const at::Tensor& extra) {
        at::Tensor loss = at::zeros({}, at::kDouble);
        for (size_t k = 0; k < outs.size(); ++k) {
          at::Tensor m = extra.defined() ? masks[r] * extra : masks[r];
          loss = loss + (outs[k] * weights[r][k] * m).sum();
        }
        return loss;
      };
  auto grads_of = [](const QwenVisionModel& m) {
    std::map<std::string, at::Tensor> g;
    for (const auto& item : m.module->named_parameters()) {
      const at::Tensor& p = item.value();
      g[item.key()] = p.grad().defined() ? p.grad().clone() : at::zeros_like(p);
    }
    return g;
  };
  {
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      loss = loss + rank_loss(r, ref_outs, at::Tensor());
    }
    loss.backward();
  }
  const auto ref_grads = grads_of(ref);

  ParityResult res;
  res.alltoalls_forward.assign(world, -1);
  res.rows_seen.assign(world, 0);
  std::vector<QwenVisionModel> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(clone_model(ref));
  }
  std::vector<double> out_diffs(world, 0.0);
  std::vector<std::map<std::string, at::Tensor>> rank_grads(world);
  std::vector<ShardPlan> plans(world);
  const at::Tensor grid_t = grid_tensor(grid);
  run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
    EncodeOptions eo;
    eo.plan.world = world;
    eo.plan.layout = media_layout(cfg);
    eo.plan.cost = flop_cost_model(tower_dims(cfg));
    eo.plan.policy.enabled = true;
    eo.plan.policy.min_tokens = 0;
    eo.plan.policy.min_frames = 0;
    const VisionTower& inner = models[rank].tower;
    VisionTower tower = [&, rank](const TowerInput& in) {
      res.rows_seen[rank] = in.pixel_values.size(0);
      return inner(in);
    };
    EncodeResult er = encode(tower, pixels, grid_t, counting, eo);
    res.alltoalls_forward[rank] = counting->alltoalls;
    TORCH_CHECK(er.outputs.size() == ref_outs.size(), "output count");
    for (size_t k = 0; k < er.outputs.size(); ++k) {
      TORCH_CHECK(er.outputs[k].sizes() == ref_outs[k].sizes(), "shape");
      out_diffs[rank] =
          std::max(out_diffs[rank], max_abs_diff(er.outputs[k], ref_outs[k]));
    }
    rank_loss(rank, er.outputs, at::Tensor()).backward();
    rank_grads[rank] = grads_of(models[rank]);
    plans[rank] = er.plan;
  });
  res.sharded = plans[0].sharded();
  res.out_diff = *std::max_element(out_diffs.begin(), out_diffs.end());
  for (const auto& kv : ref_grads) {
    at::Tensor sum = at::zeros_like(kv.second);
    for (int r = 0; r < world; ++r) {
      sum += rank_grads[r].at(kv.first);
    }
    res.grad_diff = std::max(res.grad_diff, max_abs_diff(sum, kv.second));
    res.grad_scale =
        std::max(res.grad_scale, kv.second.abs().max().item<double>());
  }
  // What a slice-only backward would give: each rank's tower sees only its
  // own loss's gradient on the rows it computed.
  if (res.sharded) {
    const QwenVisionModel so = clone_model(ref);
    const auto outs = run_tower(so, pixels, grid);
    const ShardPlan& plan = plans[0];
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      at::Tensor own = at::zeros({total, 1}, at::kDouble);
      for (size_t u = 0; u < plan.frames.units.size(); ++u) {
        if (plan.partition.assignment[u] == r) {
          const auto& unit = plan.frames.units[u];
          own.narrow(0, unit.token_offset, unit.tokens).fill_(1.0);
        }
      }
      loss = loss + rank_loss(r, outs, own);
    }
    loss.backward();
    for (const auto& kv : grads_of(so)) {
      res.slice_only_diff = std::max(
          res.slice_only_diff, max_abs_diff(kv.second, ref_grads.at(kv.first)));
    }
  }
  return res;
}

TEST_P(QwenFamilyTest, ShardedMatchesReplicatedFloat64) {
  const auto cfg = tiny_config(GetParam());
  for (int world : {2, 3}) {
    const auto r = sharded_parity(cfg, kMixed, world, 20 + world);
    ASSERT_TRUE(r.sharded);
    // Gradients are O(1) (loss weights scaled by 1/sqrt(tokens)); the bound
    // is relative to their scale.
    const double tol = 1e-12 * std::max(1.0, r.grad_scale);
    RecordProperty(
        "world" + std::to_string(world),
        "out " + sci(r.out_diff) + " grad " + sci(r.grad_diff) + " scale " +
            sci(r.grad_scale) + " slice_only " + sci(r.slice_only_diff));
    EXPECT_LE(r.out_diff, 1e-12) << "world " << world;
    EXPECT_LE(r.grad_diff, tol) << "world " << world;
    EXPECT_GT(r.slice_only_diff, 1e-3) << "the losses must discriminate";
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
  ASSERT_TRUE(r.sharded);
  EXPECT_LE(r.out_diff, 1e-12);
  EXPECT_LE(r.grad_diff, 1e-12 * std::max(1.0, r.grad_scale));
  EXPECT_EQ(r.rows_seen[2], 4) << "one (1, 2, 2) dummy frame";
}

INSTANTIATE_TEST_SUITE_P(
    Families,
    QwenFamilyTest,
    ::testing::Values(
        QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL),
    family_name);

}  // namespace
}  // namespace models
}  // namespace frameshard
