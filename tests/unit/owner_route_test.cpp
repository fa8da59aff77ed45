// Owners of visual tokens under both sequence splits, and the all-to-all
// routes of sharded plans: simulated exchanges over random workloads and
// every partitioner deliver each token to its owner exactly once, in
// ascending order, with counts that match between sender and receiver.
#include <frameshard/owner_route.h>

#include <frameshard/error.h>
#include <frameshard/splitmix64.h>

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "testing/plan_options.h"

namespace frameshard {
namespace {

using testing::always_shard;

TEST(PositionOwner, ContiguousAndLoadBalancedSplits) {
  // 16 positions over cp 2: contiguous [0, 8) -> 0; load-balanced chunks
  // of 4: 0 1 | 1 0 by chunk.
  std::vector<int64_t> c, lb;
  for (int64_t p = 0; p < 16; p += 4) {
    c.push_back(position_owner(p, 16, 2, SequenceSplit::kContiguous));
    lb.push_back(position_owner(p, 16, 2, SequenceSplit::kLoadBalanced));
  }
  EXPECT_EQ(c, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(lb, (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(position_owner(11, 12, 3, SequenceSplit::kLoadBalanced), 0);
  EXPECT_EQ(position_owner(5, 12, 3, SequenceSplit::kLoadBalanced), 2);
}

TEST(PositionOwner, BadLengthsAndPositionsAreErrors) {
  EXPECT_THROW(position_owner(0, 10, 3, SequenceSplit::kLoadBalanced), Error);
  EXPECT_THROW(position_owner(12, 12, 3, SequenceSplit::kContiguous), Error);
  EXPECT_THROW(
      visual_token_owners({3, 3}, 8, 2, SequenceSplit::kContiguous), Error);
  EXPECT_THROW(parse_sequence_split("ring"), Error);
  EXPECT_EQ(
      parse_sequence_split("load_balanced"), SequenceSplit::kLoadBalanced);
}

TEST(SequenceChunkPositions, PaddedLengthRoundsUpToTheSplitsChunkCount) {
  EXPECT_EQ(padded_sequence_length(10, 2, SequenceSplit::kLoadBalanced), 12);
  EXPECT_EQ(padded_sequence_length(10, 2, SequenceSplit::kContiguous), 10);
  EXPECT_EQ(padded_sequence_length(11, 2, SequenceSplit::kContiguous), 12);
  EXPECT_EQ(padded_sequence_length(12, 3, SequenceSplit::kLoadBalanced), 12);
  EXPECT_EQ(padded_sequence_length(0, 4, SequenceSplit::kLoadBalanced), 0);
  EXPECT_EQ(padded_sequence_length(1, 1, SequenceSplit::kLoadBalanced), 2);
}

TEST(SequenceChunkPositions, LoadBalancedRankHoldsChunkRAndItsMirror) {
  // 10 over cp 2 pads to 12: chunks of 3, rank 0 holds 0 and 3.
  EXPECT_EQ(
      sequence_chunk_positions(10, 2, 0, SequenceSplit::kLoadBalanced),
      (std::vector<int64_t>{0, 1, 2, 9, 10, 11}));
  EXPECT_EQ(
      sequence_chunk_positions(10, 2, 1, SequenceSplit::kLoadBalanced),
      (std::vector<int64_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(
      sequence_chunk_positions(6, 3, 2, SequenceSplit::kLoadBalanced),
      (std::vector<int64_t>{2, 3}));
}

TEST(SequenceChunkPositions, ContiguousRankHoldsOneChunk) {
  EXPECT_EQ(
      sequence_chunk_positions(5, 2, 1, SequenceSplit::kContiguous),
      (std::vector<int64_t>{3, 4, 5}));
  EXPECT_TRUE(
      sequence_chunk_positions(0, 2, 1, SequenceSplit::kContiguous).empty());
}

TEST(
    SequenceChunkPositions, RanksCoverThePaddedSequenceOnceAndAgreeWithOwners) {
  for (SequenceSplit split :
       {SequenceSplit::kContiguous, SequenceSplit::kLoadBalanced}) {
    for (int64_t cp = 1; cp <= 5; ++cp) {
      for (int64_t len = 0; len <= 23; ++len) {
        const int64_t total = padded_sequence_length(len, cp, split);
        std::vector<int> seen(static_cast<size_t>(total), 0);
        for (int64_t r = 0; r < cp; ++r) {
          const auto pos = sequence_chunk_positions(len, cp, r, split);
          EXPECT_EQ(static_cast<int64_t>(pos.size()), total / cp);
          for (size_t i = 0; i < pos.size(); ++i) {
            EXPECT_TRUE(i == 0 || pos[i] > pos[i - 1]);
            seen[static_cast<size_t>(pos[i])] += 1;
            EXPECT_EQ(position_owner(pos[i], total, cp, split), r);
          }
        }
        EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(total), 1));
      }
    }
  }
}

TEST(SequenceChunkPositions, BadRanksLengthsAndCpSizesAreErrors) {
  EXPECT_THROW(
      sequence_chunk_positions(8, 2, 2, SequenceSplit::kLoadBalanced), Error);
  EXPECT_THROW(
      sequence_chunk_positions(8, 2, -1, SequenceSplit::kContiguous), Error);
  EXPECT_THROW(
      padded_sequence_length(-1, 2, SequenceSplit::kContiguous), Error);
  EXPECT_THROW(
      padded_sequence_length(8, 0, SequenceSplit::kLoadBalanced), Error);
  try {
    sequence_chunk_positions(8, 2, 2, SequenceSplit::kLoadBalanced);
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "frameshard::sequence_chunk_positions: expected a rank in [0, 2), "
        "got 2");
  }
}

// Every rank's rows go out in send_order with send_counts; the receiver
// concatenates by source and applies recv_order. Returns what each rank
// ends up with (token ids).
std::vector<std::vector<int64_t>> simulate(
    const ShardPlan& plan, const std::vector<int64_t>& owner) {
  const int64_t world = plan.options.world;
  std::vector<OwnerRoute> routes;
  std::vector<std::vector<std::vector<int64_t>>> outbox(world);
  for (int64_t r = 0; r < world; ++r) {
    routes.push_back(owner_route(plan, owner, r));
    const auto mine = encoded_tokens(plan, r);
    size_t i = 0;
    outbox[r].resize(world);
    for (int64_t q = 0; q < world; ++q) {
      for (int64_t k = 0; k < routes[r].send_counts[q]; ++k, ++i) {
        outbox[r][q].push_back(mine[routes[r].send_order[i]]);
      }
    }
  }
  std::vector<std::vector<int64_t>> got(world);
  for (int64_t q = 0; q < world; ++q) {
    std::vector<int64_t> arrived;
    for (int64_t r = 0; r < world; ++r) {
      EXPECT_EQ(
          routes[q].recv_counts[r], static_cast<int64_t>(outbox[r][q].size()));
      arrived.insert(arrived.end(), outbox[r][q].begin(), outbox[r][q].end());
    }
    for (int64_t i : routes[q].recv_order) {
      got[q].push_back(arrived[i]);
    }
    EXPECT_EQ(got[q], routes[q].tokens);
  }
  return got;
}

TEST(OwnerRoute, SimulatedExchangesDeliverEveryTokenToItsOwnerInOrder) {
  SplitMix64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<GridThw> grid;
    const int media = 1 + static_cast<int>(rng.below(6));
    for (int m = 0; m < media; ++m) {
      grid.push_back(
          {1 + static_cast<int64_t>(rng.below(3)),
           2 * (1 + static_cast<int64_t>(rng.below(4))),
           2 * (1 + static_cast<int64_t>(rng.below(4)))});
    }
    PlanOptions o = always_shard(1 + static_cast<int64_t>(rng.below(5)));
    o.partitioner = all_partitioners()[rng.below(4)];
    o.min_local_patch_rows = static_cast<int64_t>(rng.below(2)) * 16;
    const ShardPlan plan = make_plan(grid, o);
    if (!plan.sharded()) {
      continue;
    }
    std::vector<int64_t> owner;
    for (int64_t t = 0; t < plan.frames.total_tokens; ++t) {
      owner.push_back(static_cast<int64_t>(rng.below(o.world)));
    }
    const auto got = simulate(plan, owner);
    for (int64_t q = 0; q < o.world; ++q) {
      std::vector<int64_t> want;
      for (size_t t = 0; t < owner.size(); ++t) {
        if (owner[t] == q) {
          want.push_back(static_cast<int64_t>(t));
        }
      }
      ASSERT_EQ(got[q], want) << "trial " << trial << " rank " << q;
    }
  }
}

TEST(OwnerRoute, ABadOwnerMapOrAReplicatedPlanIsAnError) {
  PlanOptions o = always_shard(2);
  const ShardPlan plan = make_plan({{2, 4, 4}}, o);
  ASSERT_TRUE(plan.sharded());
  try {
    owner_route(plan, {0, 1}, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "expected an owner for each of the 8 visual tokens, got 2"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(owner_route(plan, std::vector<int64_t>(8, 2), 0), Error);
  o.policy.enabled = false;
  EXPECT_THROW(
      owner_route(make_plan({{2, 4, 4}}, o), std::vector<int64_t>(8, 0), 0),
      Error);
}

}  // namespace
}  // namespace frameshard
