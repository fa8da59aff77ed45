// all_gather_rows: forward equals the concatenation in rank order (any
// dtype, trailing dims, non-contiguous input, 0-row ranks); backward is the
// reduce-scatter-v SUM (checked against the analytic gradient, against a
// central-difference estimate, and shown to differ from a slice-only
// backward); failures on one rank are errors on the others, not hangs.

#include <frameshard/runtime/gather.h>

#include "testing/run_ranks.h"
#include "testing/tensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <numeric>
#include <vector>

namespace frameshard {
namespace {

using testing::max_abs_diff;
using testing::run_ranks;
using testing::run_ranks_collect;
using testing::RunRanksOptions;

/// Row offsets of each rank's block in the gathered tensor.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  return off;
}

TEST(GatherTraffic, CountsOnlyPeersAndThePaddedMax) {
  const auto t = gather_traffic({3, 0, 5}, 0, 8);
  EXPECT_EQ(t.unpadded_bytes, 3 * 8 * 2);
  EXPECT_EQ(t.padded_bytes, 5 * 8 * 2);
  const auto z = gather_traffic({3, 0, 5}, 1, 8);
  EXPECT_EQ(z.unpadded_bytes, 0);
  EXPECT_EQ(z.padded_bytes, 5 * 8 * 2);
  const auto one = gather_traffic({7}, 0, 8);
  EXPECT_EQ(one.unpadded_bytes, 0);
  EXPECT_EQ(one.padded_bytes, 0);
  EXPECT_THROW(gather_traffic({1, 2}, 2, 8), c10::Error);
  EXPECT_THROW(gather_traffic({1, -2}, 0, 8), c10::Error);
}

TEST(AllGatherRows, WorldOneReturnsTheInputItself) {
  run_ranks(1, [](int, ProcessGroupPtr pg) {
    at::Tensor x = at::randn({3, 4});
    at::Tensor y = all_gather_rows(x, {3}, pg);
    EXPECT_TRUE(y.is_same(x));
    EXPECT_TRUE(all_gather_rows(x, {}, pg).is_same(x));
  });
}

// Forward = concatenation in rank order, for world 2..4, uneven and zero
// counts, trailing dims, a non-contiguous input and several dtypes.
TEST(AllGatherRows, ForwardConcatenatesInRankOrder) {
  const std::vector<std::vector<int64_t>> cases = {
      {2, 3}, {1, 0, 2}, {0, 4, 1, 3}, {0, 0, 0}, {5, 0}};
  const std::vector<at::ScalarType> dtypes = {
      at::kDouble, at::kFloat, at::kBFloat16, at::kLong, at::kBool};
  for (const auto& counts : cases) {
    for (auto dtype : dtypes) {
      const int world = static_cast<int>(counts.size());
      const auto off = offsets_of(counts);
      // The expected result, built in this thread: [total, 2, 3].
      at::Tensor full = at::randn({off.back(), 3, 2}, at::kDouble)
                            .mul(10)
                            .to(dtype)
                            .transpose(1, 2);  // logical [total, 2, 3]
      std::vector<at::Tensor> got(world);
      run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
        // A non-contiguous slice of the full tensor as the local input.
        at::Tensor local = full.narrow(0, off[rank], counts[rank]);
        got[rank] = all_gather_rows(local, counts, pg);
      });
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(got[r].sizes(), full.sizes()) << "rank " << r;
        EXPECT_EQ(got[r].scalar_type(), dtype);
        EXPECT_TRUE(got[r].equal(full))
            << "rank " << r << " dtype " << dtype << " world " << world;
      }
    }
  }
}

TEST(AllGatherRows, EmptyCountsAreExchangedFirst) {
  const std::vector<int64_t> counts = {2, 0, 3};
  const auto off = offsets_of(counts);
  at::Tensor full = at::arange(off.back() * 2, at::kFloat).reshape({-1, 2});
  std::vector<at::Tensor> got(3);
  run_ranks(3, [&](int rank, ProcessGroupPtr pg) {
    got[rank] =
        all_gather_rows(full.narrow(0, off[rank], counts[rank]), {}, pg);
  });
  for (const auto& g : got) {
    EXPECT_TRUE(g.equal(full));
  }
}

TEST(AllGatherRows, BadArgumentsRaiseOnTheCallingRank) {
  const auto outcomes = run_ranks_collect(2, [](int, ProcessGroupPtr pg) {
    at::Tensor x = at::zeros({2, 3});
    // Every rank passes a counts vector of the wrong size: each raises
    // locally, before any collective.
    all_gather_rows(x, {2, 2, 2}, pg);
  });
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.ok);
    EXPECT_NE(
        o.error.find("expected counts.size() == world size (2), got 3"),
        std::string::npos)
        << o.error;
  }
  const auto rows = run_ranks_collect(2, [](int, ProcessGroupPtr pg) {
    all_gather_rows(at::zeros({2, 3}), {1, 1}, pg);
  });
  EXPECT_NE(
      rows[1].error.find("[rank 1/2] expected local rows == counts[1] "
                         "(1), got 2"),
      std::string::npos)
      << rows[1].error;
}

// Backward: rank q's gradient is SUM over ranks r of d loss_r / d rows(q),
// where every rank's loss uses a different part of the gathered rows with
// its own weights (rank r: rows i with i % world == r, weights C_r).
TEST(AllGatherRows, BackwardIsReduceScatterSumNotSlice) {
  for (const auto& counts :
       std::vector<std::vector<int64_t>>{{2, 0, 3}, {3, 3}, {1, 4, 0, 2}}) {
    const int world = static_cast<int>(counts.size());
    const auto off = offsets_of(counts);
    const int64_t total = off.back();
    at::Tensor inputs = at::randn({total, 4}, at::kDouble);
    std::vector<at::Tensor> weights;
    std::vector<at::Tensor> masks;
    for (int r = 0; r < world; ++r) {
      weights.push_back(at::randn({total, 4}, at::kDouble));
      at::Tensor m = at::zeros({total, 1}, at::kDouble);
      for (int64_t i = r; i < total; i += world) {
        m[i] = 1.0;
      }
      masks.push_back(m);
    }
    std::vector<at::Tensor> grads(world);
    run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
      at::Tensor local =
          inputs.narrow(0, off[rank], counts[rank]).clone().requires_grad_();
      at::Tensor full = all_gather_rows(local, counts, pg);
      (full * weights[rank] * masks[rank]).sum().backward();
      grads[rank] = local.grad();
    });
    // Analytic: d(sum_r loss_r)/d full = sum_r weights_r * mask_r.
    at::Tensor g_full = at::zeros({total, 4}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      g_full += weights[r] * masks[r];
    }
    for (int q = 0; q < world; ++q) {
      at::Tensor expected = g_full.narrow(0, off[q], counts[q]);
      ASSERT_TRUE(grads[q].defined()) << "rank " << q;
      EXPECT_LE(max_abs_diff(grads[q], expected), 1e-15) << "rank " << q;
      // A slice-only backward (MLX, Megatron-Bridge before #4784) would give
      // rank q only its own loss's gradient; the losses are built so that
      // this differs whenever rank q has rows some other rank's loss uses.
      at::Tensor slice_only =
          (weights[q] * masks[q]).narrow(0, off[q], counts[q]);
      bool used_elsewhere = false;
      for (int64_t i = off[q]; i < off[q + 1]; ++i) {
        used_elsewhere = used_elsewhere || i % world != q;
      }
      if (used_elsewhere) {
        EXPECT_GT(max_abs_diff(slice_only, expected), 1e-3) << "rank " << q;
      }
    }
  }
}

// Central differences on a tiny float64 case with a non-linear loss. The
// objective is the SUM over ranks of each rank's loss (each rank perturbs
// the same element in lock step; the losses are summed with an allreduce).
TEST(AllGatherRows, FiniteDifferenceGradientCheck) {
  const std::vector<int64_t> counts = {2, 0, 1};
  const int world = 3;
  const auto off = offsets_of(counts);
  const int64_t total = off.back();
  at::Tensor inputs = at::randn({total, 2, 2}, at::kDouble);
  std::vector<at::Tensor> weights;
  for (int r = 0; r < world; ++r) {
    weights.push_back(at::randn({total, 2, 2}, at::kDouble));
  }
  auto loss_of = [&](int rank, const at::Tensor& full) {
    // Different rows per rank (row i belongs to rank i % world's loss, plus
    // a smaller term over all rows), non-linear in the gathered values.
    at::Tensor own = at::zeros({total, 1, 1}, at::kDouble);
    for (int64_t i = rank; i < total; i += world) {
      own[i] = 1.0;
    }
    return (at::sin(full) * weights[rank] * own).sum() +
           0.1 * (full * full * weights[rank]).sum();
  };
  std::vector<at::Tensor> analytic(world);
  std::vector<at::Tensor> numeric(world);
  run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    at::Tensor base = inputs.narrow(0, off[rank], counts[rank]).clone();
    at::Tensor local = base.clone().requires_grad_();
    loss_of(rank, all_gather_rows(local, counts, pg)).backward();
    analytic[rank] = local.grad().clone();

    const double eps = 1e-6;
    numeric[rank] = at::zeros_like(base);
    for (int q = 0; q < world; ++q) {
      for (int64_t e = 0; e < counts[q] * 4; ++e) {
        double values[2];
        for (int s = 0; s < 2; ++s) {
          at::Tensor x = base.clone();
          if (rank == q) {
            x.view({-1})[e] += (s == 0 ? eps : -eps);
          }
          at::NoGradGuard no_grad;
          at::Tensor l = loss_of(rank, all_gather_rows(x, counts, pg));
          values[s] = testing::allreduce_sum(pg, l.reshape({1})).item<double>();
        }
        if (rank == q) {
          numeric[rank].view({-1})[e] = (values[0] - values[1]) / (2 * eps);
        }
      }
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(analytic[r].sizes(), numeric[r].sizes());
    EXPECT_LE(max_abs_diff(analytic[r], numeric[r]), 1e-7) << "rank " << r;
  }
}

TEST(AllGatherRows, ZeroRowRanksGetEmptyGradients) {
  const std::vector<int64_t> counts = {0, 3, 0};
  std::vector<at::Tensor> grads(3);
  run_ranks(3, [&](int rank, ProcessGroupPtr pg) {
    at::Tensor local = at::ones({counts[rank], 5}, at::kFloat).requires_grad_();
    at::Tensor full = all_gather_rows(local, counts, pg);
    EXPECT_EQ(full.size(0), 3);
    (full * static_cast<double>(rank + 1)).sum().backward();
    grads[rank] = local.grad();
  });
  EXPECT_EQ(grads[0].sizes(), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(grads[2].sizes(), (std::vector<int64_t>{0, 5}));
  // 1 + 2 + 3: every rank's loss used all rows.
  EXPECT_TRUE(grads[1].equal(at::full({3, 5}, 6.0f)));
}

// A peer that never arrives (it returned before the collective, and its
// group is gone) is an error on the others within the timeout.
TEST(AllGatherRows, PeerThatExitsIsAnErrorNotAHang) {
  RunRanksOptions opts;
  opts.timeout = std::chrono::milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_ranks_collect(
      3,
      [](int rank, ProcessGroupPtr pg) {
        if (rank == 1) {
          return;  // exits mid-call
        }
        all_gather_rows(at::ones({2, 2}), {2, 2, 2}, pg);
      },
      opts);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(outcomes[1].ok);
  for (int r : {0, 2}) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r;
    EXPECT_NE(outcomes[r].error.find("alltoall_base failed"), std::string::npos)
        << outcomes[r].error;
  }
  EXPECT_LT(elapsed, std::chrono::milliseconds(2000 + 4000));
}

// The same in backward: one rank never runs backward.
TEST(AllGatherRows, PeerThatSkipsBackwardIsAnErrorNotAHang) {
  RunRanksOptions opts;
  opts.timeout = std::chrono::milliseconds(2000);
  const auto outcomes = run_ranks_collect(
      3,
      [](int rank, ProcessGroupPtr pg) {
        at::Tensor local = at::ones({1, 2}).requires_grad_();
        at::Tensor full = all_gather_rows(local, {1, 1, 1}, pg);
        if (rank == 2) {
          return;
        }
        full.sum().backward();
      },
      opts);
  EXPECT_TRUE(outcomes[2].ok);
  for (int r : {0, 1}) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r;
    EXPECT_NE(outcomes[r].error.find("all_gather_rows"), std::string::npos)
        << outcomes[r].error;
  }
}

}  // namespace
}  // namespace frameshard
