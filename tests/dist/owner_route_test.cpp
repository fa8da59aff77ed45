// Owner-routed visual embeddings (frameshard/owner_route.h,
// frameshard/runtime/route.h): encode with token_owner sends each row only
// to the rank whose sequence shard uses it. Through the parity harness
// (rank q's loss uses exactly the rows q owns, so rank-specific losses on
// different rows), the outputs each rank receives and the parameter
// gradients summed over ranks must equal the replicated path's, float64,
// for both sequence splits, world 2 to 4, every partitioner, dummy and
// floor frames and several outputs (DeepStack-like) in one all-to-all.
#include <frameshard/owner_route.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/route.h>

#include "parity/parity.h"
#include "testing/parity_ranks.h"
#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "testing/test_tower.h"
#include "testing/token_owners.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using namespace testing;

struct OwnerCase {
  std::vector<GridThw> grid = kMixedGrid;
  int world = 2;
  SequenceSplit split = SequenceSplit::kLoadBalanced;
  bool route = true;
  int outputs = 3;
  PlanOptions plan = always_shard(2);
};

testing::ParityRun run_owner(const OwnerCase& c) {
  parity::ParitySpec spec;
  spec.grid = c.grid;
  spec.plan = c.plan;
  spec.plan.world = c.world;
  spec.in_features = kTestFeatures;
  spec.seed = 5;
  const FrameSet frames = expand_frames(c.grid, spec.plan.layout);
  spec.token_owner = spread_token_owners(frames.total_tokens, c.world, c.split);
  spec.route_to_owner = c.route;
  return testing::run_parity(spec, test_tower_factory(c.outputs));
}

void expect_parity(const testing::ParityRun& run) {
  EXPECT_LE(run.report.max_output_diff(), 1e-12);
  EXPECT_LE(run.report.max_gradient_diff(), 1e-12)
      << "worst " << run.report.worst_gradient().name;
}

TEST(OwnerRoute, EachRankReceivesExactlyItsRowsWithReplicatedGradients) {
  for (int world : {2, 3, 4}) {
    for (auto split :
         {SequenceSplit::kContiguous, SequenceSplit::kLoadBalanced}) {
      OwnerCase c;
      c.world = world;
      c.split = split;
      const auto run = run_owner(c);
      SCOPED_TRACE("world " + std::to_string(world) + ", " + to_string(split));
      ASSERT_TRUE(run.report.plan.sharded());
      expect_parity(run);
      const auto owner = spread_token_owners(
          run.report.plan.frames.total_tokens, world, split);
      for (int q = 0; q < world; ++q) {
        const auto& res = run.ranks[q].encode;
        // Only the owned rows arrive, in ascending token order.
        const std::vector<int64_t> want = testing::tokens_owned_by(owner, q);
        EXPECT_EQ(res.tokens, want) << "rank " << q;
        EXPECT_EQ(res.outputs[0].size(0), static_cast<int64_t>(want.size()));
        // And fewer bytes than the all-gather would bring.
        EXPECT_LT(res.bytes_received, res.allgather_bytes_received)
            << "rank " << q;
      }
    }
  }
}

TEST(OwnerRoute, AgreesWithTheAllGatherOnTheSameOwners) {
  // The same losses through the all-gather (each rank keeps its rows after
  // receiving all): both equal the reference, so they equal each other.
  OwnerCase c;
  c.world = 3;
  c.route = false;
  const auto all = run_owner(c);
  c.route = true;
  const auto owner = run_owner(c);
  expect_parity(all);
  expect_parity(owner);
  for (int q = 0; q < 3; ++q) {
    EXPECT_LE(
        testing::max_abs_diff(
            all.ranks[q].local_grads, owner.ranks[q].local_grads),
        1e-12)
        << "rank " << q;
  }
}

TEST(OwnerRoute, ComposesWithLptDummiesAndFloorFrames) {
  OwnerCase lpt;
  lpt.grid = {{1, 8, 8}, {1, 2, 2}, {1, 4, 4}, {2, 2, 2}, {1, 6, 6}, {1, 2, 4}};
  lpt.world = 3;
  lpt.plan.partitioner = Partitioner::kLpt;
  const auto a = run_owner(lpt);
  EXPECT_FALSE(a.report.plan.restore_rows.empty());
  expect_parity(a);

  OwnerCase dummy;  // fewer frames than ranks: ranks 2, 3 encode nothing
  dummy.grid = {{1, 4, 4}, {1, 2, 2}};
  dummy.world = 4;
  dummy.plan.min_local_patch_rows = 24;
  const auto b = run_owner(dummy);
  EXPECT_EQ(b.report.plan.ranks[3].dummy_frames, 1);
  expect_parity(b);

  OwnerCase count;
  count.grid = {{7, 2, 2}};
  count.world = 4;
  count.plan.partitioner = Partitioner::kCount;
  expect_parity(run_owner(count));
}

TEST(OwnerRoute, ReplicatedPathSelectsTheOwnedRowsWithoutCommunicating) {
  OwnerCase c;
  c.world = 2;
  c.plan.policy.enabled = false;
  const auto run = run_owner(c);
  EXPECT_FALSE(run.report.plan.sharded());
  expect_parity(run);
  EXPECT_EQ(run.ranks[1].encode.bytes_received, 0);
}

TEST(AllToAllRows, RowsArriveInRankOrderAndGradientsReturnUnsummed) {
  // Rank r sends r + 1 rows to each peer q, valued 100 r + q; the backward
  // of loss_r = sum(received * (r + 1)) gives each sent row the weight of
  // its single receiver, nothing summed.
  const int world = 3;
  std::vector<at::Tensor> received(world), grads(world);
  testing::run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    std::vector<int64_t> send(world, rank + 1), recv(world);
    std::vector<at::Tensor> rows;
    for (int q = 0; q < world; ++q) {
      recv[q] = q + 1;
      rows.push_back(at::full({rank + 1, 2}, 100.0 * rank + q, at::kDouble));
    }
    at::Tensor local = at::cat(rows).requires_grad_(true);
    at::Tensor out = all_to_all_rows(local, send, recv, pg);
    (out * double(rank + 1)).sum().backward();
    received[rank] = out.detach();
    grads[rank] = local.grad();
  });
  for (int r = 0; r < world; ++r) {
    int64_t row = 0;
    for (int q = 0; q < world; ++q) {
      for (int i = 0; i <= q; ++i, ++row) {
        EXPECT_EQ(received[r][row][0].item<double>(), 100.0 * q + r);
      }
    }
    row = 0;
    for (int q = 0; q < world; ++q) {
      for (int i = 0; i <= r; ++i, ++row) {
        EXPECT_EQ(grads[r][row][1].item<double>(), double(q + 1));
      }
    }
  }
}

TEST(OwnerRoute, AnOwnerMapOfTheWrongSizeRaisesOnEveryRank) {
  const int world = 2;
  const auto params = testing::random_test_tower_params(at::kDouble);
  const FrameSet frames = expand_frames(kMixedGrid, MediaLayout{});
  const at::Tensor pixels =
      at::randn({frames.total_patch_rows, kTestFeatures}, at::kDouble);
  const auto outcomes =
      testing::run_ranks_collect(world, [&](int rank, ProcessGroupPtr pg) {
        EncodeOptions o;
        o.plan = always_shard(world);
        o.token_owner = spread_token_owners(
            frames.total_tokens, world, SequenceSplit::kContiguous);
        if (rank == 1) {
          o.token_owner.pop_back();
        }
        encode(
            [&](const TowerInput& in) {
              return testing::test_tower(params, in, 1);
            },
            pixels,
            grid_to_tensor(kMixedGrid),
            pg,
            o);
      });
  for (const auto& out : outcomes) {
    ASSERT_FALSE(out.ok);
    EXPECT_NE(
        out.error.find("expected token_owner to have one entry per "
                       "visual token (31), got 30"),
        std::string::npos)
        << out.error;
  }
}

}  // namespace
}  // namespace frameshard
