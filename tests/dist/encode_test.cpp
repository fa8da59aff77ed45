// frameshard::encode, multi-rank: the sharded path must give the replicated
// path's outputs AND parameter gradients (summed over ranks), and every
// failure or disagreement must raise the same error on every rank instead
// of hanging.
//
// Gradient tests: each rank's loss uses a DIFFERENT part of the gathered
// rows (rank r: rows i with i % world == r, as under round-robin sequence
// CP) with rank-specific random weights; the replicated reference loss is
// the sum of those losses on the full output. Every parity run also
// computes the gradient a slice-only backward would give (each rank's tower
// seeing only its own loss's gradient on its own rows, the bug fixed by
// Megatron-Bridge #4784) and checks that it differs from the true one, so
// the setup can tell the two apart.
//
// bfloat16 bound: the tower runs in bfloat16 on both paths with the same
// per-row arithmetic (outputs came out bit-identical in our runs); what
// differs is where gradients are rounded and summed: each rank's output
// gradient is rounded to bfloat16 before the reduce-scatter sums it, and
// each rank's parameter gradient is a bfloat16 partial sum before the sum
// over ranks, versus one rounding of the summed gradient on the replicated
// path. The bound is max |diff| <= 2^-4 * max(1, max |reference gradient|);
// measured over seeds 0..7 and worlds 2..4: at most 0.023 of the scale,
// while a slice-only backward is off by 0.7 to 1.0 of it.

#include <frameshard/runtime/encode.h>

#include "testing/run_ranks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace frameshard {
namespace {

using testing::RankOutcome;
using testing::run_ranks;
using testing::run_ranks_collect;
using testing::RunRanksOptions;
using testing::strip_rank_prefix;

constexpr int64_t kFeatures = 12;
constexpr int64_t kMerge = 2;
constexpr int64_t kHidden1 = 6;
constexpr int64_t kHidden2 = 5;
constexpr int64_t kHidden3 = 3;

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) {
    return 0.0;
  }
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// A parameter's gradient in float64; zeros when it got none (an output
/// the case does not use).
at::Tensor grad_or_zeros(const at::Tensor& p) {
  return p.grad().defined() ? p.grad().to(at::kDouble)
                            : at::zeros(p.sizes(), at::kDouble);
}

// ------------------------------------------------------------ test tower

struct Params {
  at::Tensor w1, b1, pos, w2, w3;
  std::vector<at::Tensor> list() const {
    return {w1, b1, pos, w2, w3};
  }
};

Params random_params(at::ScalarType dtype) {
  auto r = [&](std::vector<int64_t> s) {
    return (at::randn(s, at::kDouble) * 0.5).to(dtype);
  };
  return {
      r({kFeatures, kHidden1}),
      r({kHidden1}),
      r({kHidden1}),
      r({kHidden1, kHidden2}),
      r({kHidden1, kHidden3})};
}

Params leaf_copy(const Params& p, bool requires_grad) {
  auto c = [&](const at::Tensor& t) {
    return t.detach().clone().requires_grad_(requires_grad);
  };
  return {c(p.w1), c(p.b1), c(p.pos), c(p.w2), c(p.w3)};
}

/// Per-row linear map plus a per-frame position signal (row index inside
/// its frame, from cu_seqlens), tanh, then the mean over each group of
/// merge^2 consecutive rows (a 2x2 merger); extra "DeepStack" outputs are
/// functions of the merged rows. It checks that grid_thw and cu_seqlens
/// describe its pixel rows frame by frame, so a wrong local grid or
/// cu_seqlens fails loudly, and a wrong frame split changes the outputs.
std::vector<at::Tensor> test_tower(
    const Params& p, const TowerInput& in, int outputs) {
  const int64_t rows = in.pixel_values.size(0);
  TORCH_CHECK(in.cu_seqlens.scalar_type() == at::kInt, "test tower: cu int32");
  TORCH_CHECK(in.grid_thw.scalar_type() == at::kLong, "test tower: grid int64");
  at::Tensor cu = in.cu_seqlens.cpu();
  at::Tensor grid = in.grid_thw.cpu();
  std::vector<int64_t> frame_rows;
  for (int64_t g = 0; g < grid.size(0); ++g) {
    for (int64_t t = 0; t < grid[g][0].item<int64_t>(); ++t) {
      frame_rows.push_back(
          grid[g][1].item<int64_t>() * grid[g][2].item<int64_t>());
    }
  }
  TORCH_CHECK(
      cu.numel() == static_cast<int64_t>(frame_rows.size()) + 1,
      "test tower: cu_seqlens has one entry per frame plus one");
  TORCH_CHECK(cu[0].item<int>() == 0, "test tower: cu_seqlens[0] == 0");
  std::vector<double> pos(static_cast<size_t>(rows), 0.0);
  for (size_t f = 0; f < frame_rows.size(); ++f) {
    const int64_t a = cu[f].item<int>();
    const int64_t b = cu[f + 1].item<int>();
    TORCH_CHECK(b - a == frame_rows[f], "test tower: frame size mismatch");
    for (int64_t j = a; j < b; ++j) {
      pos[static_cast<size_t>(j)] = static_cast<double>(j - a) / (b - a);
    }
  }
  TORCH_CHECK(cu[-1].item<int>() == rows, "test tower: cu_seqlens[-1] == rows");
  const auto dtype = in.pixel_values.scalar_type();
  at::Tensor pos_col =
      at::tensor(pos, at::kDouble).to(dtype).reshape({rows, 1});
  at::Tensor h =
      at::tanh(at::matmul(in.pixel_values, p.w1) + p.b1 + pos_col * p.pos);
  at::Tensor merged =
      h.reshape({rows / (kMerge * kMerge), kMerge * kMerge, kHidden1}).mean(1);
  std::vector<at::Tensor> outs{merged};
  if (outputs >= 2) {
    outs.push_back(at::matmul(merged, p.w2));
  }
  if (outputs >= 3) {
    outs.push_back(at::tanh(at::matmul(merged, p.w3)));
  }
  return outs;
}

/// The replicated reference input, built from the grid independently of
/// the library: one cu_seqlens segment per temporal patch.
TowerInput full_input(
    const at::Tensor& pixels, const std::vector<GridThw>& grid) {
  std::vector<int32_t> cu{0};
  std::vector<int64_t> flat;
  for (const auto& g : grid) {
    for (int64_t t = 0; t < g.t; ++t) {
      cu.push_back(cu.back() + static_cast<int32_t>(g.h * g.w));
    }
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  TowerInput in;
  in.pixel_values = pixels;
  in.grid_thw = at::tensor(flat, at::kLong).reshape({-1, 3});
  in.cu_seqlens = at::tensor(cu, at::kInt);
  return in;
}

at::Tensor grid_tensor(const std::vector<GridThw>& grid) {
  std::vector<int64_t> flat;
  for (const auto& g : grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  return at::tensor(flat, at::kLong).reshape({-1, 3});
}

int64_t patch_rows(const std::vector<GridThw>& grid) {
  int64_t n = 0;
  for (const auto& g : grid) {
    n += g.t * g.h * g.w;
  }
  return n;
}

PlanOptions sharding_options(int world) {
  PlanOptions o;
  o.world = world;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;  // shard whenever cp_size > 1
  o.policy.min_frames = 0;
  o.min_local_patch_rows = 0;
  return o;
}

// Images mixed with videos (10 frame units, 31 tokens).
const std::vector<GridThw> kMixed = {
    {1, 4, 4}, {2, 4, 6}, {1, 2, 2}, {3, 2, 4}, {1, 6, 4}, {2, 2, 2}};

// ------------------------------------------------------------ parity run

struct ParityCase {
  std::vector<GridThw> grid = kMixed;
  int world = 2;
  at::ScalarType dtype = at::kDouble;
  int outputs = 2;
  PlanOptions plan = sharding_options(2);  // world is overwritten
  bool count_collectives = false;
  uint64_t seed = 0;
};

struct ParityResult {
  ShardPlan plan;                // rank 0's plan
  double out_diff = 0.0;         // max over ranks and outputs
  double grad_diff = 0.0;        // sum over ranks vs reference, max over params
  double grad_scale = 0.0;       // max |reference gradient|
  double slice_only_diff = 0.0;  // slice-only vs true reference gradient
  std::vector<std::vector<at::Tensor>> rank_grads;  // [rank][param]
  std::vector<int64_t> rows_seen;  // pixel rows the tower got, per rank
  std::vector<int64_t> bytes_sent;
  std::vector<int> allgathers, alltoalls_forward, alltoalls_total;
};

ParityResult run_parity(const ParityCase& c) {
  torch::manual_seed(c.seed);
  const int world = c.world;
  PlanOptions popts = c.plan;
  popts.world = world;
  const Params params = random_params(c.dtype);
  const at::Tensor pixels =
      at::randn({patch_rows(c.grid), kFeatures}, at::kDouble).to(c.dtype);

  // Reference: the tower on everything.
  const Params ref_params = leaf_copy(params, true);
  auto ref_outs = test_tower(ref_params, full_input(pixels, c.grid), c.outputs);
  const int64_t total = ref_outs[0].size(0);

  // Rank-specific weights over rank-specific rows (round robin).
  std::vector<std::vector<at::Tensor>> weights(world);
  std::vector<at::Tensor> masks;
  for (int r = 0; r < world; ++r) {
    for (const auto& o : ref_outs) {
      weights[r].push_back(at::randn({total, o.size(1)}, at::kDouble));
    }
    at::Tensor m = at::zeros({total, 1}, at::kDouble);
    for (int64_t i = r; i < total; i += world) {
      m[i] = 1.0;
    }
    masks.push_back(m);
  }
  auto rank_loss = [&](int r,
                       const std::vector<at::Tensor>& outs,
                       const at::Tensor& extra_mask) {
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (size_t k = 0; k < outs.size(); ++k) {
      at::Tensor m = masks[r];
      if (extra_mask.defined()) {
        m = m * extra_mask;
      }
      loss = loss + (outs[k].to(at::kDouble) * weights[r][k] * m).sum();
    }
    return loss;
  };
  {
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      loss = loss + rank_loss(r, ref_outs, at::Tensor());
    }
    loss.backward();
  }
  std::vector<at::Tensor> ref_grads;
  for (const auto& p : ref_params.list()) {
    ref_grads.push_back(grad_or_zeros(p));
  }

  ParityResult res;
  res.rank_grads.resize(world);
  res.rows_seen.assign(world, -1);
  res.bytes_sent.assign(world, -1);
  res.allgathers.assign(world, 0);
  res.alltoalls_forward.assign(world, 0);
  res.alltoalls_total.assign(world, 0);
  std::vector<double> out_diffs(world, 0.0);
  std::vector<ShardPlan> plans(world);
  const at::Tensor grid = grid_tensor(c.grid);

  run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    c10::intrusive_ptr<testing::CountingGroup> counting;
    if (c.count_collectives) {
      counting = c10::make_intrusive<testing::CountingGroup>(pg);
      pg = counting;
    }
    const Params mine = leaf_copy(params, true);
    EncodeOptions eo;
    eo.plan = popts;
    auto tower = [&](const TowerInput& in) {
      res.rows_seen[rank] = in.pixel_values.size(0);
      return test_tower(mine, in, c.outputs);
    };
    EncodeResult er = encode(tower, pixels, grid, pg, eo);
    ASSERT_EQ(er.outputs.size(), ref_outs.size());
    for (size_t k = 0; k < er.outputs.size(); ++k) {
      ASSERT_EQ(er.outputs[k].sizes(), ref_outs[k].sizes());
      out_diffs[rank] =
          std::max(out_diffs[rank], max_abs_diff(er.outputs[k], ref_outs[k]));
    }
    if (counting) {
      res.allgathers[rank] = counting->allgathers;
      res.alltoalls_forward[rank] = counting->alltoalls;
    }
    rank_loss(rank, er.outputs, at::Tensor()).backward();
    if (counting) {
      res.alltoalls_total[rank] = counting->alltoalls;
    }
    for (const auto& p : mine.list()) {
      res.rank_grads[rank].push_back(grad_or_zeros(p));
    }
    res.bytes_sent[rank] = er.bytes_sent;
    plans[rank] = er.plan;
  });
  res.plan = plans[0];
  res.out_diff = *std::max_element(out_diffs.begin(), out_diffs.end());
  for (size_t i = 0; i < ref_grads.size(); ++i) {
    at::Tensor sum = at::zeros_like(ref_grads[i]);
    for (int r = 0; r < world; ++r) {
      sum += res.rank_grads[r][i];
    }
    res.grad_diff = std::max(res.grad_diff, max_abs_diff(sum, ref_grads[i]));
    res.grad_scale =
        std::max(res.grad_scale, ref_grads[i].abs().max().item<double>());
  }

  // What a slice-only backward would produce: rank r's tower receives only
  // its own loss's gradient, on the rows it computed.
  if (world > 1 && res.plan.sharded()) {
    const Params so_params = leaf_copy(params, true);
    auto so_outs = test_tower(so_params, full_input(pixels, c.grid), c.outputs);
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      at::Tensor own = at::zeros({total, 1}, at::kDouble);
      for (size_t u = 0; u < res.plan.frames.units.size(); ++u) {
        if (res.plan.partition.assignment[u] == r) {
          const auto& unit = res.plan.frames.units[u];
          own.narrow(0, unit.token_offset, unit.tokens).fill_(1.0);
        }
      }
      loss = loss + rank_loss(r, so_outs, own);
    }
    loss.backward();
    const auto so = so_params.list();
    for (size_t i = 0; i < ref_grads.size(); ++i) {
      res.slice_only_diff = std::max(
          res.slice_only_diff,
          max_abs_diff(grad_or_zeros(so[i]), ref_grads[i]));
    }
  }
  return res;
}

void expect_parity(const ParityResult& r, at::ScalarType dtype) {
  double tol = 1e-12;
  if (dtype == at::kFloat) {
    tol = 1e-5;
  } else if (dtype == at::kBFloat16) {
    tol = std::ldexp(1.0, -4) * std::max(1.0, r.grad_scale);
  }
  EXPECT_LE(r.out_diff, tol) << "outputs differ";
  EXPECT_LE(r.grad_diff, tol) << "parameter gradients differ";
  if (r.plan.sharded() && r.plan.options.world > 1) {
    // The losses discriminate: a slice-only backward would be far outside
    // the tolerance.
    EXPECT_GT(r.slice_only_diff, std::max(1e-2, 4 * tol));
  }
}

// ------------------------------------------------------------ parity tests

class EncodeParityWorld : public ::testing::TestWithParam<int> {};

TEST(FrameCuSeqlens, OneInt32SegmentPerTemporalPatch) {
  const std::vector<GridThw> grid{{1, 4, 6}, {3, 2, 2}, {2, 8, 4}};
  const at::Tensor cu = frame_cu_seqlens(grid);
  EXPECT_EQ(cu.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(cu, full_input(at::Tensor(), grid).cu_seqlens));
  EXPECT_EQ(frame_cu_seqlens({}).numel(), 1);
  // 2^31 rows do not fit int32: an error, not a silent wrap.
  try {
    frame_cu_seqlens({{2, 32768, 32768}});
    ADD_FAILURE() << "expected an int32 overflow error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("frameshard::frame_cu_seqlens: expected "
                                   "cu_seqlens entries to fit int32"),
        std::string::npos)
        << e.what();
  }
}

TEST_P(EncodeParityWorld, ImagesMixedWithVideosFloat64) {
  ParityCase c;
  c.world = GetParam();
  c.seed = 10 + static_cast<uint64_t>(c.world);
  const auto r = run_parity(c);
  EXPECT_EQ(r.plan.sharded(), c.world > 1);
  expect_parity(r, c.dtype);
  // Every rank fed the tower only its own frames.
  int64_t seen = 0;
  for (auto s : r.rows_seen) {
    seen += s;
  }
  EXPECT_EQ(seen, patch_rows(c.grid));
}

INSTANTIATE_TEST_SUITE_P(
    World1To4, EncodeParityWorld, ::testing::Values(1, 2, 3, 4));

TEST(EncodeParity, FewerFramesThanRanksUsesDummiesWithZeroGradient) {
  for (int world : {3, 4}) {
    ParityCase c;
    c.grid = {{1, 4, 4}, {1, 2, 2}};
    c.world = world;
    const auto r = run_parity(c);
    ASSERT_TRUE(r.plan.sharded());
    expect_parity(r, c.dtype);
    for (int rank = 2; rank < world; ++rank) {
      EXPECT_EQ(r.plan.ranks[rank].dummy_frames, 1);
      EXPECT_EQ(r.plan.gather_counts[rank], 0);
      EXPECT_EQ(r.rows_seen[rank], kMerge * kMerge);  // one minimal frame
      for (const auto& g : r.rank_grads[rank]) {
        EXPECT_TRUE(g.eq(0).all().item<bool>())
            << "a dummy rank contributed gradient";
      }
    }
  }
}

TEST(EncodeParity, ExactSplit) {
  for (int world : {2, 4}) {
    ParityCase c;
    c.grid = {{4, 4, 4}};
    c.world = world;
    const auto r = run_parity(c);
    EXPECT_EQ(r.plan.gather_counts, std::vector<int64_t>(world, 16 / world));
    expect_parity(r, c.dtype);
  }
}

TEST(EncodeParity, RemainderOnTheLastRank) {
  ParityCase c;
  c.grid = {{7, 2, 2}};
  c.world = 4;
  c.plan.partitioner = Partitioner::kCount;
  const auto r = run_parity(c);
  EXPECT_EQ(r.plan.gather_counts, (std::vector<int64_t>{1, 1, 1, 4}));
  expect_parity(r, c.dtype);
}

TEST(EncodeParity, OneLongVideoSplitAcrossRanks) {
  ParityCase c;
  c.grid = {{16, 4, 4}};
  c.world = 3;
  const auto r = run_parity(c);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(r.plan.ranks[rank].units.empty());
    EXPECT_EQ(r.plan.ranks[rank].grid.size(), 1u);  // one (count, h, w) row
  }
  expect_parity(r, c.dtype);
}

TEST(EncodeParity, FloorPaddingNeverEntersTheGather) {
  ParityCase c;
  c.grid = {{8, 2, 2}};
  c.world = 4;
  c.plan.min_local_patch_rows = 24;
  const auto r = run_parity(c);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(r.plan.ranks[rank].pad_frames, 4);
    EXPECT_EQ(r.rows_seen[rank], 24);
    EXPECT_EQ(r.plan.gather_counts[rank], 2);
  }
  expect_parity(r, c.dtype);

  // Floor with dummies: real ranks grow to the floor, dummy ranks do not.
  ParityCase d;
  d.grid = {{1, 4, 4}, {1, 2, 2}};
  d.world = 4;
  d.plan.min_local_patch_rows = 96;
  const auto s = run_parity(d);
  EXPECT_EQ(s.rows_seen, (std::vector<int64_t>{96, 96, 4, 4}));
  expect_parity(s, d.dtype);
}

TEST(EncodeParity, SeveralOutputsTravelInOneCollective) {
  ParityCase c;
  c.world = 3;
  c.outputs = 3;
  c.count_collectives = true;
  const auto r = run_parity(c);
  expect_parity(r, c.dtype);
  const int64_t row_bytes = (kHidden1 + kHidden2 + kHidden3) * 8;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(r.allgathers[rank], 1) << "one consensus all-gather";
    EXPECT_EQ(r.alltoalls_forward[rank], 1) << "one fused forward gather";
    EXPECT_EQ(r.alltoalls_total[rank], 2) << "one fused backward";
    EXPECT_EQ(r.bytes_sent[rank], r.plan.gather_counts[rank] * row_bytes * 2);
  }
}

TEST(EncodeParity, LptPermutationIsRestored) {
  ParityCase c;
  c.grid = {{1, 8, 8}, {1, 2, 2}, {1, 4, 4}, {2, 2, 2}, {1, 6, 6}, {1, 2, 4}};
  c.world = 3;
  c.plan.partitioner = Partitioner::kLpt;
  const auto r = run_parity(c);
  EXPECT_FALSE(r.plan.restore_rows.empty()) << "expected a non-trivial order";
  expect_parity(r, c.dtype);
}

TEST(EncodeParity, Float32) {
  ParityCase c;
  c.world = 3;
  c.dtype = at::kFloat;
  expect_parity(run_parity(c), c.dtype);
}

TEST(EncodeParity, BFloat16WithinTheDocumentedBound) {
  for (uint64_t seed : {0, 1}) {
    for (int world : {2, 3, 4}) {
      ParityCase c;
      c.world = world;
      c.seed = seed;
      c.dtype = at::kBFloat16;
      const auto r = run_parity(c);
      SCOPED_TRACE(
          "seed " + std::to_string(seed) + " world " + std::to_string(world));
      expect_parity(r, c.dtype);
    }
  }
}

TEST(EncodeParity, ReplicatedWhenDisabledOrBelowThresholds) {
  ParityCase off;
  off.world = 2;
  off.plan.policy.enabled = false;
  off.count_collectives = true;
  const auto r = run_parity(off);
  EXPECT_FALSE(r.plan.sharded());
  expect_parity(r, off.dtype);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r.rows_seen[rank], patch_rows(off.grid));  // the whole batch
    EXPECT_EQ(r.bytes_sent[rank], 0);
    // The consensus still runs (a rank that shards while another
    // replicates must raise, not hang), and nothing else does.
    EXPECT_EQ(r.allgathers[rank], 1);
    EXPECT_EQ(r.alltoalls_total[rank], 0);
  }

  ParityCase below;  // 31 tokens < 1000 and 10 units < 1000
  below.world = 2;
  below.plan.policy.min_tokens = 1000;
  below.plan.policy.min_frames = 1000;
  EXPECT_FALSE(run_parity(below).plan.sharded());

  ParityCase frames;  // 10 units >= 5 shards although tokens are few
  frames.world = 2;
  frames.plan.policy.min_tokens = 1000;
  frames.plan.policy.min_frames = 5;
  const auto f = run_parity(frames);
  EXPECT_TRUE(f.plan.sharded());
  expect_parity(f, frames.dtype);
}

// ------------------------------------------------------------ errors

/// Runs encode of kMixed on `world` ranks; `customize` may change the
/// rank's grid, options, pixels or tower before the call.
struct RankCall {
  std::vector<GridThw> grid = kMixed;
  EncodeOptions options;
  std::function<std::vector<at::Tensor>(const TowerInput&)> tower;
  bool skip = false;  // the rank exits without calling encode
};

std::vector<RankOutcome> run_encode(
    int world,
    const std::function<void(int rank, RankCall&)>& customize,
    const RunRanksOptions& ropts = {}) {
  torch::manual_seed(1);
  const Params params = random_params(at::kDouble);
  return run_ranks_collect(
      world,
      [&](int rank, ProcessGroupPtr pg) {
        RankCall call;
        call.options.plan = sharding_options(world);
        const Params mine = leaf_copy(params, true);
        call.tower = [&mine](const TowerInput& in) {
          return test_tower(mine, in, 2);
        };
        customize(rank, call);
        if (call.skip) {
          return;
        }
        at::Tensor pixels =
            at::zeros({patch_rows(call.grid), kFeatures}, at::kDouble);
        auto res = encode(
            call.tower, pixels, grid_tensor(call.grid), pg, call.options);
        at::Tensor loss = res.outputs[0].sum();
        if (loss.requires_grad()) {
          loss.backward();
        }
      },
      ropts);
}

/// Every rank raised, with the same text after its "[rank r/W] " prefix,
/// containing `needle`.
void expect_same_error_everywhere(
    const std::vector<RankOutcome>& outcomes, const std::string& needle) {
  ASSERT_FALSE(outcomes.empty());
  const std::string first = strip_rank_prefix(outcomes[0].error);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r << " did not raise";
    EXPECT_EQ(
        outcomes[r].error.rfind(
            "frameshard::encode: [rank " + std::to_string(r) + "/" +
                std::to_string(outcomes.size()) + "] ",
            0),
        0u)
        << outcomes[r].error;
    EXPECT_EQ(strip_rank_prefix(outcomes[r].error), first) << "rank " << r;
  }
  EXPECT_NE(first.find(needle), std::string::npos) << first;
}

TEST(EncodeErrors, RanksGivenDifferentGridsAllRaise) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 2) {
      call.grid[4] = {1, 4, 6};  // same patch count, different frame shape
    }
  });
  expect_same_error_everywhere(
      outcomes, "ranks disagree on the plan fingerprint: rank 0 has 0x");
  EXPECT_NE(
      outcomes[0].error.find("(different grid_thw or options?)"),
      std::string::npos);
}

TEST(EncodeErrors, ARankThatWouldReplicateWhileOthersShardRaises) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 1) {
      call.options.plan.policy.enabled = false;
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on the plan: rank 0 takes the sharded path, rank 1 the "
      "replicated path");
}

TEST(EncodeErrors, ATowerThatThrowsOnOneRankRaisesEverywhere) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 1) {
      call.tower = [](const TowerInput&) -> std::vector<at::Tensor> {
        throw std::runtime_error("boom on rank 1");
      };
    }
  });
  expect_same_error_everywhere(
      outcomes, "rank 1 failed while running the tower: boom on rank 1");
}

TEST(EncodeErrors, WrongRowCountOnOneRankRaisesEverywhere) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 2) {
      auto inner = call.tower;
      call.tower = [inner](const TowerInput& in) {
        auto outs = inner(in);
        outs[0] = outs[0].narrow(0, 0, outs[0].size(0) - 1);
        return outs;
      };
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "rank 2 failed while checking the tower outputs: "
      "frameshard::encode: [rank 2/3] expected tower output 0 to have");
}

TEST(EncodeErrors, DisagreementOnDtypeOrOutputsRaisesEverywhere) {
  const auto dtype = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 2) {
      auto inner = call.tower;
      call.tower = [inner](const TowerInput& in) {
        auto outs = inner(in);
        for (auto& o : outs) {
          o = o.to(at::kFloat);
        }
        return outs;
      };
    }
  });
  expect_same_error_everywhere(
      dtype,
      "ranks disagree on the output dtype: rank 0 has Double, rank 2 has "
      "Float");

  const auto count = run_encode(2, [](int rank, RankCall& call) {
    if (rank == 1) {
      auto inner = call.tower;
      call.tower = [inner](const TowerInput& in) {
        return std::vector<at::Tensor>{inner(in)[0]};
      };
    }
  });
  expect_same_error_everywhere(
      count,
      "ranks disagree on the number of tower outputs: rank 0 has 2, "
      "rank 1 has 1");
}

TEST(EncodeErrors, BadGridOnOneRankRaisesEverywhere) {
  const auto outcomes = run_encode(2, [](int rank, RankCall& call) {
    if (rank == 0) {
      call.grid[0] = {1, 3, 4};  // h not divisible by the merge size
    }
  });
  expect_same_error_everywhere(outcomes, "rank 0 failed while planning: ");
}

TEST(EncodeErrors, GradModeOnSomeRanksOnlyRaises) {
  torch::manual_seed(1);
  const Params params = random_params(at::kDouble);
  const auto guarded = run_ranks_collect(2, [&](int rank, ProcessGroupPtr pg) {
    const Params mine = leaf_copy(params, true);
    EncodeOptions eo;
    eo.plan = sharding_options(2);
    auto tower = [&mine](const TowerInput& in) {
      return test_tower(mine, in, 1);
    };
    at::Tensor pixels = at::zeros({patch_rows(kMixed), kFeatures}, at::kDouble);
    if (rank == 1) {
      at::NoGradGuard no_grad;
      encode(tower, pixels, grid_tensor(kMixed), pg, eo);
    } else {
      encode(tower, pixels, grid_tensor(kMixed), pg, eo);
    }
  });
  expect_same_error_everywhere(
      guarded,
      "ranks disagree on grad mode: rank 0 has it enabled, rank 1 has it "
      "disabled");
}

// A peer that exits before the call: the others raise within the timeout.
TEST(EncodeErrors, PeerThatExitsMidCallIsAnErrorNotAHang) {
  RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_encode(
      3, [](int rank, RankCall& call) { call.skip = rank == 1; }, ropts);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(outcomes[1].ok);
  for (int r : {0, 2}) {
    ASSERT_FALSE(outcomes[r].ok);
    EXPECT_NE(outcomes[r].error.find("allgather failed"), std::string::npos)
        << outcomes[r].error;
  }
  EXPECT_LT(elapsed, std::chrono::milliseconds(2000 + 4000));
}

// A peer that stays alive but never arrives: the group timeout (Gloo's own)
// and, when shorter, EncodeOptions::timeout bound the others' wait.
TEST(EncodeErrors, PeerThatNeverArrivesTimesOut) {
  for (bool per_call : {false, true}) {
    RunRanksOptions ropts;
    ropts.timeout = std::chrono::milliseconds(per_call ? 5000 : 800);
    const auto outcomes = run_encode(
        3,
        [&](int rank, RankCall& call) {
          if (per_call) {
            call.options.timeout = std::chrono::milliseconds(300);
          }
          if (rank == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2000));
            call.skip = true;
          }
        },
        ropts);
    for (int r : {0, 2}) {
      ASSERT_FALSE(outcomes[r].ok) << "rank " << r;
      EXPECT_NE(outcomes[r].error.find("allgather failed"), std::string::npos)
          << outcomes[r].error;
      // Raised on its own clock, well before the sleeping peer went away.
      EXPECT_LT(outcomes[r].elapsed, std::chrono::milliseconds(1600))
          << "rank " << r << " per_call " << per_call;
    }
  }
}

// A peer that exits after the forward, before backward: the others' backward
// raises instead of waiting forever.
TEST(EncodeErrors, PeerThatExitsBeforeBackwardIsAnErrorNotAHang) {
  RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(2000);
  torch::manual_seed(1);
  const Params params = random_params(at::kDouble);
  const auto outcomes = run_ranks_collect(
      3,
      [&](int rank, ProcessGroupPtr pg) {
        const Params mine = leaf_copy(params, true);
        EncodeOptions eo;
        eo.plan = sharding_options(3);
        auto tower = [&mine](const TowerInput& in) {
          return test_tower(mine, in, 1);
        };
        at::Tensor pixels =
            at::zeros({patch_rows(kMixed), kFeatures}, at::kDouble);
        auto res = encode(tower, pixels, grid_tensor(kMixed), pg, eo);
        if (rank == 2) {
          return;
        }
        res.outputs[0].sum().backward();
      },
      ropts);
  EXPECT_TRUE(outcomes[2].ok) << outcomes[2].error;
  for (int r : {0, 1}) {
    ASSERT_FALSE(outcomes[r].ok);
    EXPECT_NE(outcomes[r].error.find("alltoall_base failed"), std::string::npos)
        << outcomes[r].error;
  }
}

// Megatron-Bridge #4784: a rank whose output needs no gradient while the
// others' do must still take part in the backward reduce-scatter.
TEST(EncodeErrors, RankWithoutGradientStillJoinsBackward) {
  RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(3000);
  const auto outcomes = run_encode(
      3,
      [&](int rank, RankCall& call) {
        if (rank == 2) {
          auto inner = call.tower;
          call.tower = [inner](const TowerInput& in) {
            auto outs = inner(in);
            for (auto& o : outs) {
              o = o.detach();
            }
            return outs;
          };
        }
      },
      ropts);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].error;
  }
}

TEST(EncodeErrors, CpSizeMismatchUsesMegatronBridgesMessage) {
  torch::manual_seed(1);
  const Params params = random_params(at::kDouble);
  auto outcomes = run_ranks_collect(1, [&](int, ProcessGroupPtr pg) {
    EncodeOptions eo;
    eo.plan = sharding_options(2);
    encode(
        [&](const TowerInput& in) { return test_tower(params, in, 1); },
        at::zeros({patch_rows(kMixed), kFeatures}, at::kDouble),
        grid_tensor(kMixed),
        pg,
        eo);
  });
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_EQ(
      outcomes[0].error,
      "frameshard: vision frame sharding cp_size=2 does not match its process "
      "group (size 1)");

  outcomes =
      run_encode(2, [](int, RankCall& call) { call.options.plan.world = 3; });
  for (const auto& o : outcomes) {
    EXPECT_EQ(
        o.error,
        "frameshard: vision frame sharding cp_size=3 does not match its "
        "process group (size 2)");
  }
}

TEST(EncodeErrors, TrainableTowerOverAWiderGroupRaisesBeforeAnyCollective) {
  torch::manual_seed(2);
  const Params params = random_params(at::kDouble);
  std::vector<int> collectives(2, -1);
  const auto outcomes = run_ranks_collect(2, [&](int rank, ProcessGroupPtr pg) {
    auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
    EncodeOptions eo;
    eo.plan = sharding_options(2);
    eo.group_spans_only_cp = false;  // e.g. a CP x TP group
    eo.tower_trainable = true;
    try {
      encode(
          [&](const TowerInput& in) { return test_tower(params, in, 1); },
          at::zeros({patch_rows(kMixed), kFeatures}, at::kDouble),
          grid_tensor(kMixed),
          counting,
          eo);
    } catch (...) {
      collectives[rank] = counting->total();
      throw;
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "expected a frozen tower (tower_trainable = false) when "
      "sharding over a group wider than CP");
  EXPECT_EQ(collectives, (std::vector<int>{0, 0}));
}

TEST(EncodeErrors, FrozenTowerOverAWiderGroupIsAllowed) {
  torch::manual_seed(3);
  const Params params = random_params(at::kDouble);
  const at::Tensor pixels =
      at::randn({patch_rows(kMixed), kFeatures}, at::kDouble);
  const auto ref = test_tower(params, full_input(pixels, kMixed), 2);
  std::vector<double> diffs(4, 1.0);
  std::vector<bool> sharded(4, false);
  run_ranks(4, [&](int rank, ProcessGroupPtr pg) {
    const Params frozen = leaf_copy(params, false);
    EncodeOptions eo;
    eo.plan = sharding_options(4);  // the CP x TP group of size 4
    eo.group_spans_only_cp = false;
    eo.tower_trainable = false;
    auto res = encode(
        [&](const TowerInput& in) { return test_tower(frozen, in, 2); },
        pixels,
        grid_tensor(kMixed),
        pg,
        eo);
    sharded[rank] = res.plan.sharded();
    diffs[rank] = std::max(
        max_abs_diff(res.outputs[0], ref[0]),
        max_abs_diff(res.outputs[1], ref[1]));
    EXPECT_FALSE(res.outputs[0].requires_grad());
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(sharded[r]);
    EXPECT_LE(diffs[r], 1e-12);
  }
}

TEST(EncodeWorldOne, ErrorsPropagateAsRaised) {
  const auto outcomes = run_ranks_collect(1, [](int, ProcessGroupPtr pg) {
    EncodeOptions eo;
    eo.plan = sharding_options(1);
    try {
      encode(
          [](const TowerInput&) -> std::vector<at::Tensor> {
            throw std::domain_error("tower says no");
          },
          at::zeros({patch_rows(kMixed), kFeatures}, at::kDouble),
          grid_tensor(kMixed),
          pg,
          eo);
    } catch (const std::domain_error&) {
      return;  // the tower's own exception type
    }
    throw std::runtime_error("expected the tower's exception");
  });
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].error;
}

TEST(GridFromTensor, ConvertsAndRejects) {
  const auto g = grid_from_tensor(
      at::tensor({1, 4, 4, 2, 2, 6}, at::kInt).reshape({2, 3}));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[1], (GridThw{2, 2, 6}));
  EXPECT_TRUE(grid_from_tensor(at::zeros({0, 3}, at::kLong)).empty());
  try {
    grid_from_tensor(at::zeros({2, 2}, at::kLong));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace())
            .find(
                "expected an integer [n, 3] tensor, got Long of shape [2, 2]"),
        std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_THROW(grid_from_tensor(at::zeros({2, 3}, at::kFloat)), c10::Error);
}

}  // namespace
}  // namespace frameshard
