// The runtime on CUDA tensors: ranks are threads, each on its own GPU with
// NCCL when the machine has one GPU per rank, else all on GPU 0 with Gloo
// moving CUDA tensors (testing::RunRanksOptions::device). On a machine
// without a GPU every test here is reported SKIPPED with the reason; they
// run in scripts/gpu-check.sh. References are computed on the CPU in
// float64, so the checks are device-independent.

#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>

#include <frameshard/models/toy_tower.h>

#include "testing/parity_ranks.h"
#include "testing/run_ranks.h"
#include "testing/test_tower.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <vector>

namespace frameshard {
namespace {

using testing::cuda_rank_device;
using testing::run_ranks;

// Forward: the concatenation in rank order, on each rank's device. Backward:
// rank q receives the SUM over ranks of the gradient of its rows (ranks use
// different rows with their own weights, so a slice-only backward fails).
TEST(CudaRanks, GatherOfCudaRowsConcatenatesAndSumsGradients) {
  FRAMESHARD_REQUIRE_CUDA();
  for (const auto& counts :
       std::vector<std::vector<int64_t>>{{3, 5}, {0, 4}, {2, 0, 3}}) {
    const int world = static_cast<int>(counts.size());
    std::vector<int64_t> off(world + 1, 0);
    std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
    at::Tensor full = at::randn({off.back(), 6}, at::kDouble);
    std::vector<at::Tensor> weights;
    for (int r = 0; r < world; ++r) {
      weights.push_back(at::randn({off.back(), 6}, at::kDouble));
    }
    // Expected gradient of rank q's rows: sum over r of weights[r] there.
    at::Tensor wsum = at::zeros_like(full);
    for (const auto& w : weights) {
      wsum += w;
    }
    std::vector<at::Tensor> got(world), grad(world);
    run_ranks(
        world,
        [&](int rank, ProcessGroupPtr pg) {
          const c10::Device dev = cuda_rank_device(rank, world);
          at::Tensor local = full.narrow(0, off[rank], counts[rank])
                                 .to(dev)
                                 .requires_grad_(true);
          at::Tensor all = all_gather_rows(local, counts, pg);
          EXPECT_EQ(all.device(), dev);
          (all * weights[rank].to(dev)).sum().backward();
          got[rank] = all.detach().cpu();
          grad[rank] = local.grad().cpu();
        },
        testing::cuda_rank_options());
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(got[r].equal(full)) << "rank " << r;
      EXPECT_TRUE(at::allclose(
          grad[r], wsum.narrow(0, off[r], counts[r]), 1e-12, 1e-12))
          << "rank " << r;
    }
  }
}

// The whole sharded path on CUDA tensors (plan, local frames, the tower on
// the GPU, consensus, gather, backward) against the replicated reference on
// the CPU, float64, rank-specific losses on different rows. Cross-device
// float64 (other kernels, other reduction orders) is held to 1e-10, not the
// 1e-12 of CPU-vs-CPU.
TEST(CudaRanks, ToyTowerEncodeOnCudaMatchesTheReplicatedPath) {
  FRAMESHARD_REQUIRE_CUDA();
  for (int world : {2, 3}) {
    parity::ParitySpec spec;
    spec.grid = {{1, 4, 6}, {2, 4, 4}, {1, 2, 2}, {3, 2, 4}, {1, 8, 4}};
    spec.plan = testing::always_shard(world);
    spec.in_features = models::ToyTowerOptions{}.in_features();
    spec.seed = 31;
    const auto run = testing::run_parity(
        spec,
        [](at::ScalarType dtype) {
          models::ToyTower tower(models::ToyTowerOptions{});
          tower->to(dtype);
          return parity::module_instance(
              models::as_vision_tower(tower), tower.ptr());
        },
        [world](int rank, const ProcessGroupPtr&, parity::RankOptions& o) {
          o.device = cuda_rank_device(rank, world);
        },
        testing::cuda_rank_options());
    const parity::ParityReport& rep = run.report;
    ASSERT_TRUE(rep.plan.sharded()) << rep.plan.reason;
    EXPECT_EQ(run.ranks[0].encode.outputs[0].device().type(), c10::kCUDA);
    EXPECT_LE(rep.max_output_diff(), 1e-10) << "world " << world;
    EXPECT_LE(rep.max_gradient_diff(), 1e-10) << "world " << world;
    ASSERT_TRUE(rep.slice_only_diff.has_value());
    EXPECT_GT(*rep.slice_only_diff, 1e-3) << "the losses must discriminate";
  }
}

}  // namespace
}  // namespace frameshard
