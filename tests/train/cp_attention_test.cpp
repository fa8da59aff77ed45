// The decoder's context parallelism: the load-balanced split and causal
// attention across ranks against single-process attention (float64 values
// and gradients, with rank-specific losses).
#include <frameshard/train/cp_attention.h>

#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>

#include <vector>

namespace frameshard {
namespace {

using testing::max_abs_diff;

TEST(CpLocalPositions, RankHoldsChunkRAndItsMirror) {
  EXPECT_EQ(
      train::cp_local_positions(8, 2, 0), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(
      train::cp_local_positions(8, 2, 1), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(train::cp_local_positions(6, 3, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(
      train::cp_local_positions(4, 1, 0), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(CpLocalPositions, LengthNotAMultipleOfTwiceCpIsAnError) {
  EXPECT_NE(
      std::string(testing::torch_error_of([] {
        train::cp_local_positions(10, 3, 0);
      })).find("positive multiple of 2 * cp_size = 6, got 10"),
      std::string::npos);
}

// Every rank attends its chunks; rank r's loss weights its own outputs
// with W (so the losses differ per rank and add up to sum(out * W)).
void check_against_single_process(int world) {
  const int64_t heads = 2, len = 12 * world, dim = 4;
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::manual_seed(7);
  at::Tensor q = at::randn({heads, len, dim}, opts).requires_grad_(true);
  at::Tensor k = at::randn({heads, len, dim}, opts).requires_grad_(true);
  at::Tensor v = at::randn({heads, len, dim}, opts).requires_grad_(true);
  at::Tensor w = at::randn({heads, len, dim}, opts);
  at::Tensor ref =
      at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  (ref * w).sum().backward();

  std::vector<double> out_diff(world), gq(world), gk(world), gv(world);
  testing::run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    const auto pos = train::cp_local_positions(len, world, rank);
    at::Tensor idx = at::tensor(pos, at::TensorOptions().dtype(at::kLong));
    at::Tensor ql = q.detach().index_select(1, idx).requires_grad_(true);
    at::Tensor kl = k.detach().index_select(1, idx).requires_grad_(true);
    at::Tensor vl = v.detach().index_select(1, idx).requires_grad_(true);
    at::Tensor out = train::cp_causal_attention(ql, kl, vl, idx, len, pg);
    (out * w.index_select(1, idx)).sum().backward();
    out_diff[rank] = max_abs_diff(out, ref.detach().index_select(1, idx));
    gq[rank] = max_abs_diff(ql.grad(), q.grad().index_select(1, idx));
    gk[rank] = max_abs_diff(kl.grad(), k.grad().index_select(1, idx));
    gv[rank] = max_abs_diff(vl.grad(), v.grad().index_select(1, idx));
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_LE(out_diff[r], 1e-12) << "rank " << r;
    EXPECT_LE(gq[r], 1e-12) << "rank " << r;
    // K and V: every rank's queries used them; the gather's backward must
    // bring each rank the sum of all those gradients.
    EXPECT_LE(gk[r], 1e-12) << "rank " << r;
    EXPECT_LE(gv[r], 1e-12) << "rank " << r;
  }
}

TEST(CpCausalAttention, MatchesSingleProcessAttentionOverTwoRanks) {
  check_against_single_process(2);
}

TEST(CpCausalAttention, MatchesSingleProcessAttentionOverThreeRanks) {
  check_against_single_process(3);
}

TEST(CpCausalAttention, OneRankWithoutAGroupAttendsLocally) {
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor q = at::randn({1, 4, 2}, opts);
  at::Tensor pos = at::arange(4, opts.dtype(at::kLong));
  at::Tensor out = train::cp_causal_attention(q, q, q, pos, 4, nullptr);
  at::Tensor ref = at::scaled_dot_product_attention(q, q, q, {}, 0.0, true);
  EXPECT_LE(max_abs_diff(out, ref), 1e-12);
}

}  // namespace
}  // namespace frameshard
