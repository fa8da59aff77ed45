// Plans over the dp x cp mesh (frameshard/mesh_plan.h): the pooled plan is
// the CP plan of the replicas' concatenated grids over dp * cp ranks, every
// pixel row reaches the rank that encodes it from its own replica, and every
// output row reaches exactly the ranks of its replica that consume it.
#include <frameshard/error.h>
#include <frameshard/mesh_plan.h>
#include <frameshard/workload.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/plan_options.h"

namespace frameshard {
namespace {

using testing::always_shard_mesh;
using testing::error_of;
using testing::expect_contains;

using Grid = std::vector<GridThw>;
using Ints = std::vector<int64_t>;

Grid concat(const std::vector<Grid>& replicas) {
  Grid all;
  for (const Grid& g : replicas) {
    all.insert(all.end(), g.begin(), g.end());
  }
  return all;
}

// Checks both routes of every rank of `mp` against the plan (see the banner).
void expect_routes_deliver(
    const MeshPlan& mp, const std::vector<Ints>& owners = {}) {
  const int64_t world = mp.dp * mp.cp;
  std::vector<MeshPixelRoute> px;
  std::vector<OwnerRoute> out;
  for (int64_t r = 0; r < world; ++r) {
    px.push_back(mesh_pixel_route(mp, r));
    out.push_back(mesh_output_route(mp, r, owners));
  }
  for (int64_t d = 0; d < world; ++d) {
    // Pixels: what every source sends d, in source order, is d's rows.
    Ints got;
    for (int64_t s = 0; s < world; ++s) {
      EXPECT_EQ(px[s].send_counts[d], px[d].recv_counts[s]) << s << "->" << d;
      // The sender of replica q's rows to d is q's cp rank d % cp.
      if (px[s].send_counts[d] > 0) {
        EXPECT_EQ(s % mp.cp, d % mp.cp) << s << "->" << d;
      }
      // The ranges s sends d, in pooled coordinates.
      int64_t skip = 0;
      for (int64_t e = 0; e < d; ++e) {
        skip += px[s].send_counts[e];
      }
      const int64_t q = mp.replica_of_rank(s);
      int64_t taken = 0;
      for (const RowRange& range : px[s].send_ranges) {
        for (int64_t row = range.begin; row < range.end; ++row, ++taken) {
          if (taken >= skip && taken < skip + px[s].send_counts[d]) {
            got.push_back(row + mp.replica_patch_rows[q]);
            // Replica-local rows stay inside the sender's replica.
            EXPECT_LT(
                row + mp.replica_patch_rows[q], mp.replica_patch_rows[q + 1]);
          }
        }
      }
    }
    Ints want;
    for (const RowRange& range : mp.plan.ranks[d].pixel_ranges) {
      for (int64_t row = range.begin; row < range.end; ++row) {
        want.push_back(row);
      }
    }
    EXPECT_EQ(got, want) << "pixel rows of rank " << d;

    // Outputs: d receives its replica's tokens (all, or the owned ones).
    const int64_t q = mp.replica_of_rank(d);
    Ints expect_tokens;
    for (int64_t t = mp.replica_tokens[q]; t < mp.replica_tokens[q + 1]; ++t) {
      if (owners.empty() ||
          owners[q][t - mp.replica_tokens[q]] == d - q * mp.cp) {
        expect_tokens.push_back(t);
      }
    }
    EXPECT_EQ(out[d].tokens, expect_tokens) << "tokens of rank " << d;
    for (int64_t s = 0; s < world; ++s) {
      EXPECT_EQ(out[s].send_counts[d], out[d].recv_counts[s]);
    }
  }
  // Each encoded row goes out once per consumer: cp times, or once.
  for (int64_t s = 0; s < world; ++s) {
    const int64_t rows = mp.plan.ranks[s].real_tokens;
    const int64_t sent = std::accumulate(
        out[s].send_counts.begin(), out[s].send_counts.end(), int64_t{0});
    EXPECT_EQ(sent, owners.empty() ? rows * mp.cp : rows) << s;
  }
}

TEST(MeshPlan, IsTheCpPlanOfThePooledGridOverTheWholeMesh) {
  const std::vector<Grid> replicas = {
      {{1, 16, 16}, {4, 8, 8}}, {{1, 32, 32}}, {{2, 8, 12}, {1, 4, 4}}};
  const MeshPlan mp = make_mesh_plan(replicas, always_shard_mesh(3, 2));
  PlanOptions o = always_shard_mesh(3, 2).plan;
  o.world = 6;
  const ShardPlan pooled = make_plan(concat(replicas), o);
  EXPECT_EQ(mp.plan.fingerprint, pooled.fingerprint);
  EXPECT_EQ(mp.plan.options.world, 6);
  EXPECT_EQ(mp.replica_media, (Ints{0, 2, 3, 5}));
  EXPECT_EQ(mp.replica_units, (Ints{0, 5, 6, 9}));
  EXPECT_EQ(mp.replica_patch_rows, (Ints{0, 512, 1536, 1744}));
  EXPECT_EQ(mp.replica_tokens, (Ints{0, 128, 384, 436}));
  EXPECT_EQ(mp.replica_of_token(127), 0);
  EXPECT_EQ(mp.replica_of_token(128), 1);
  EXPECT_EQ(mp.replica_of_unit(8), 2);
  EXPECT_EQ(mp.replica_of_rank(5), 2);
  expect_routes_deliver(mp);
}

TEST(MeshPlan, ATextOnlyReplicaEncodesItsNeighboursFrames) {
  // DP 2 x CP 1: replica 0 has all the media, replica 1 only text. The CP
  // plan leaves replica 0's single rank with everything; the mesh plan
  // gives replica 1's rank half.
  const std::vector<Grid> replicas = {
      {{1, 32, 32}, {1, 16, 16}, {1, 16, 16}, {1, 32, 32}}, {}};
  const MeshPlan mp = make_mesh_plan(replicas, always_shard_mesh(2, 1));
  ASSERT_TRUE(mp.plan.sharded());
  EXPECT_EQ(mp.replica_units, (Ints{0, 4, 4}));
  EXPECT_FALSE(mp.plan.ranks[1].units.empty());
  const double total =
      mp.plan.partition.rank_costs[0] + mp.plan.partition.rank_costs[1];
  EXPECT_DOUBLE_EQ(mp.plan.partition.max_cost(), 0.5 * total);
  expect_routes_deliver(mp);
  // Replica 1's rank sends nothing it owns (it has no pixels) and receives
  // no outputs (it has no visual tokens).
  EXPECT_TRUE(mesh_pixel_route(mp, 1).send_ranges.empty());
  EXPECT_TRUE(mesh_output_route(mp, 1).tokens.empty());
}

TEST(MeshPlan, NoMediaOnAnyReplicaIsTheReplicatedPathWithEmptyRanks) {
  const MeshPlan mp = make_mesh_plan({{}, {}}, always_shard_mesh(2, 2));
  EXPECT_TRUE(mp.empty());
  EXPECT_FALSE(mp.plan.sharded());
  EXPECT_EQ(mp.plan.reason, "no media on any replica");
  ASSERT_EQ(mp.plan.ranks.size(), 4u);
  EXPECT_EQ(mp.plan.gather_counts, (Ints{0, 0, 0, 0}));
  const MeshPixelRoute px = mesh_pixel_route(mp, 2);
  EXPECT_EQ(px.recv_counts, (Ints{0, 0, 0, 0}));
  expect_contains(
      error_of([&] { mesh_output_route(mp, 0); }),
      "expected a sharded plan, got the replicated path (no media on any "
      "replica)");
}

TEST(MeshPlan, OwnerRoutingSendsEachRowOnlyToItsConsumer) {
  const std::vector<Grid> replicas = {{{1, 16, 16}, {2, 8, 8}}, {{1, 8, 24}}};
  const MeshPlan mp = make_mesh_plan(replicas, always_shard_mesh(2, 2));
  // Alternate owners within each replica's tokens.
  std::vector<Ints> owners(2);
  for (int64_t q = 0; q < 2; ++q) {
    for (int64_t t = mp.replica_tokens[q]; t < mp.replica_tokens[q + 1]; ++t) {
      owners[q].push_back(t % 2);
    }
  }
  expect_routes_deliver(mp, owners);
  owners[1].pop_back();
  expect_contains(
      error_of([&] { mesh_output_route(mp, 0, owners); }),
      "expected an owner for each of replica 1's 48 visual tokens, got 47");
  owners[1].push_back(2);
  expect_contains(
      error_of([&] { mesh_output_route(mp, 0, owners); }),
      "expected owners (cp ranks) in [0, 2), got 2 for replica 1");
}

TEST(MeshPlan, SplitFramesCrossReplicaBoundaries) {
  // One page of 4096 rows on replica 0, a small image on replica 1: the
  // optimal plan cuts the page, and pieces of it land on replica 1's ranks,
  // whose pixels then come from replica 0.
  const std::vector<Grid> replicas = {{{1, 64, 64}}, {{1, 8, 8}}};
  const MeshPlan mp = make_mesh_plan(replicas, always_shard_mesh(2, 2, true));
  ASSERT_TRUE(mp.plan.split);
  bool remote_piece = false;
  for (int64_t r = 2; r < 4; ++r) {
    for (int64_t u : mp.plan.ranks[r].units) {
      remote_piece = remote_piece || mp.replica_of_unit(u) == 0;
    }
  }
  EXPECT_TRUE(remote_piece);
  expect_routes_deliver(mp);
}

TEST(MeshPlan, NeverWorseThanTheSlowestReplicasCpPlan) {
  // Replicas drawing different presets: the pooled optimum is at most the
  // worst replica's own CP optimum (any per-replica plan is one of the
  // pooled plans' candidates only when contiguous, so compare bottlenecks).
  for (uint64_t seed = 0; seed < 6; ++seed) {
    const std::vector<std::string> names = {"doc", "multi", "video", "mixed"};
    std::vector<Grid> replicas;
    for (int q = 0; q < 2; ++q) {
      replicas.push_back(
          scale_workload(preset_workload(names[(seed + q) % 4], seed), 8).grid);
    }
    replicas.push_back({});  // and a text-only replica
    const MeshPlan mp = make_mesh_plan(replicas, always_shard_mesh(3, 2));
    double worst = 0.0;
    for (const Grid& g : replicas) {
      if (g.empty()) {
        continue;
      }
      PlanOptions o = always_shard_mesh(1, 2).plan;
      o.world = 2;
      worst = std::max(worst, make_plan(g, o).partition.max_cost());
    }
    EXPECT_LE(mp.plan.partition.max_cost(), worst * (1 + 1e-12)) << seed;
  }
}

// --- The per-step choice (policy auto) and the CP-only plan ---------------

MeshPlanOptions auto_mesh(int64_t dp, int64_t cp, bool split = false) {
  MeshPlanOptions o = always_shard_mesh(dp, cp, split);
  o.plan.policy.kind = PolicyKind::kAuto;
  return o;
}

// Three document pages on replica 0, text only on replica 1 (issue 25's
// straggler).
const std::vector<Grid> kStraggler = {
    {{1, 64, 64}, {1, 64, 64}, {1, 64, 64}}, {}};

TEST(BlockedPlan, KeepsEachBlockOnItsOwnRanksAndPartitionsItAlone) {
  const Grid grid = {{1, 16, 16}, {4, 8, 8}, {1, 32, 32}, {2, 8, 12}};
  PlanOptions o = always_shard_mesh(1, 1).plan;
  o.world = 4;
  const ShardPlan p = make_blocked_plan(grid, o, {0, 5, 8}, "blocks");
  ASSERT_TRUE(p.sharded());
  EXPECT_EQ(p.reason, "blocks");
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t u : p.ranks[r].units) {
      EXPECT_EQ(u < 5, r < 2) << "unit " << u << " on rank " << r;
    }
  }
  PlanOptions half = o;
  half.world = 2;
  const ShardPlan first = make_plan({grid[0], grid[1]}, half);
  EXPECT_EQ(p.partition.rank_costs[0], first.partition.rank_costs[0]);
  EXPECT_EQ(p.partition.rank_costs[1], first.partition.rank_costs[1]);
  EXPECT_EQ(
      std::accumulate(p.gather_counts.begin(), p.gather_counts.end(), 0LL),
      p.frames.total_tokens);
}

TEST(BlockedPlan, GivesTheRanksOfAnEmptyBlockADummyFrame) {
  PlanOptions o = always_shard_mesh(1, 1).plan;
  o.world = 4;
  const ShardPlan p =
      make_blocked_plan({{1, 16, 16}, {1, 8, 8}}, o, {0, 2, 2}, "");
  EXPECT_EQ(p.ranks[2].dummy_frames, 1);
  EXPECT_EQ(p.ranks[3].dummy_frames, 1);
  EXPECT_EQ(p.ranks[2].real_tokens, 0);
  EXPECT_EQ(p.ranks[0].dummy_frames + p.ranks[1].dummy_frames, 0);
}

TEST(BlockedPlan, CutsAPageOnlyAcrossItsOwnBlocksRanks) {
  PlanOptions o = always_shard_mesh(1, 1, true).plan;
  o.world = 4;
  const ShardPlan p =
      make_blocked_plan({{1, 64, 64}, {1, 8, 8}}, o, {0, 1, 2}, "");
  ASSERT_TRUE(p.split);
  EXPECT_EQ(p.ranks[0].units, (Ints{0}));
  EXPECT_EQ(p.ranks[1].units, (Ints{0}));
  for (int64_t r = 2; r < 4; ++r) {
    for (int64_t u : p.ranks[r].units) {
      EXPECT_EQ(u, 1) << "rank " << r;
    }
  }
}

TEST(BlockedPlan, RefusesBlocksThatCutAMediaItemOrTheWorld) {
  PlanOptions o = always_shard_mesh(1, 1).plan;
  o.world = 4;
  expect_contains(
      error_of([&] {
        make_blocked_plan({{4, 8, 8}}, o, {0, 2, 4}, "");
      }),
      "frameshard::make_blocked_plan: expected block offsets on media "
      "boundaries, got unit 2 inside grid row 0");
  expect_contains(
      error_of([&] {
        make_blocked_plan({{1, 8, 8}}, o, {0, 1, 1, 1}, "");
      }),
      "expected options.world a multiple of the 3 blocks, got 4");
}

TEST(MeshChoice, PoolsTheStragglerAndSaysWhy) {
  const MeshPlan mp = make_mesh_plan(kStraggler, auto_mesh(2, 1));
  ASSERT_TRUE(mp.choice.weighed);
  EXPECT_EQ(mp.mode, MeshMode::kMesh);
  EXPECT_GT(mp.choice.gain(), 0.25);
  EXPECT_LT(mp.choice.mesh.total(), mp.choice.cp_only.total());
  expect_contains(mp.choice.reason, "mesh: ");
  expect_contains(mp.choice.reason, ">= mesh_min_gain 0.05)");
  expect_routes_deliver(mp);
}

TEST(MeshChoice, KeepsBalancedReplicasOnTheirOwnRanks) {
  // Equal replicas: pooling only adds traffic.
  const std::vector<Grid> replicas = {
      {{1, 32, 32}, {1, 16, 16}, {1, 32, 32}},
      {{1, 32, 32}, {1, 32, 32}, {1, 16, 16}}};
  const MeshPlan mp = make_mesh_plan(replicas, auto_mesh(2, 2));
  ASSERT_TRUE(mp.choice.weighed);
  EXPECT_EQ(mp.mode, MeshMode::kCpOnly);
  EXPECT_EQ(to_string(mp.mode), "cp-only");
  expect_contains(mp.plan.reason, "cp-only: ");
  EXPECT_EQ(mp.plan.reason, mp.choice.reason);
  EXPECT_EQ(mp.plan.fingerprint, recompute_fingerprint(mp.plan));
  // Each replica's units on its own ranks; pixels never leave a replica.
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t u : mp.plan.ranks[r].units) {
      EXPECT_EQ(mp.replica_of_unit(u), mp.replica_of_rank(r));
    }
    const MeshPixelRoute px = mesh_pixel_route(mp, r);
    for (int64_t s = 0; s < 4; ++s) {
      EXPECT_EQ(px.recv_counts[s] > 0, s == r && px.recv_counts[r] > 0);
    }
  }
  expect_routes_deliver(mp);
  // The same batch under the threshold policy pools, as before.
  const MeshPlan pooled = make_mesh_plan(replicas, always_shard_mesh(2, 2));
  EXPECT_FALSE(pooled.choice.weighed);
  EXPECT_EQ(pooled.mode, MeshMode::kMesh);
}

TEST(MeshChoice, AtCp1TheCpOnlyPlanMovesNoBytes) {
  const std::vector<Grid> replicas = {{{1, 32, 32}}, {{1, 32, 32}}};
  const MeshPlan mp = make_mesh_plan(replicas, auto_mesh(2, 1));
  ASSERT_EQ(mp.mode, MeshMode::kCpOnly);
  EXPECT_EQ(mp.choice.cp_only.route_bytes, 0);
  EXPECT_DOUBLE_EQ(mp.choice.cp_only.route_seconds, 0.0);
}

TEST(MeshChoice, PredictsTheBytesTheSlowestRankReceives) {
  // DP 2 x CP 1, whole frames: rank 1 receives its units' pixel rows from
  // replica 0, and rank 0 the tokens rank 1 encoded.
  MeshPlanOptions o = auto_mesh(2, 1);
  o.pixel_row_bytes = 100;
  o.plan.policy.gather_row_bytes = 1000;
  const MeshPlan mp = make_mesh_plan(kStraggler, o);
  ASSERT_EQ(mp.mode, MeshMode::kMesh);
  const RankShard& r1 = mp.plan.ranks[1];
  const int64_t want =
      std::max(r1.real_patch_rows * 100, r1.real_tokens * 1000);
  EXPECT_EQ(mp.choice.mesh.route_bytes, want);
  EXPECT_DOUBLE_EQ(
      mp.choice.mesh.route_seconds,
      static_cast<double>(want) / (o.plan.policy.gather_bandwidth_gbps * 1e9));
  EXPECT_DOUBLE_EQ(
      mp.choice.mesh.compute_seconds,
      mp.plan.partition.max_cost() * mp.plan.options.cost.seconds_per_unit);
}

TEST(MeshChoice, TheRestOfTheStepCanMakeTheMeshLose) {
  // Replica 0 has three pages, replica 1 text only but a language-model
  // step as long as replica 0's pages. Each replica on its own, the step
  // takes V; pooled, the replicas wait for each other: V / 2 + V.
  MeshPlanOptions o = auto_mesh(2, 1);
  const MeshPlan alone = make_mesh_plan(kStraggler, o);
  ASSERT_EQ(alone.mode, MeshMode::kMesh);
  const double v = alone.choice.cp_only.compute_seconds;
  o.replica_other_seconds = {0.0, v};
  const MeshPlan mp = make_mesh_plan(kStraggler, o);
  EXPECT_EQ(mp.mode, MeshMode::kCpOnly) << mp.choice.reason;
  EXPECT_DOUBLE_EQ(mp.choice.mesh.other_seconds, v);
  EXPECT_DOUBLE_EQ(mp.choice.cp_only.total(), v);
  EXPECT_GT(mp.choice.mesh.total(), 1.4 * v);
  // The long step on the replica with the pages instead: pooling still
  // pays, by the same seconds as without it.
  o.replica_other_seconds = {v, 0.0};
  const MeshPlan pooled = make_mesh_plan(kStraggler, o);
  EXPECT_EQ(pooled.mode, MeshMode::kMesh);
  EXPECT_NEAR(
      pooled.choice.cp_only.total() - pooled.choice.mesh.total(),
      alone.choice.cp_only.total() - alone.choice.mesh.total(),
      1e-12);
  o.replica_other_seconds = {v};
  expect_contains(
      error_of([&] { make_mesh_plan(kStraggler, o); }),
      "expected options.replica_other_seconds empty or one per replica (2), "
      "got 1");
}

TEST(MeshChoice, EveryExchangeOfTheRoutesCostsTheLatency) {
  // The pooled plan adds two exchanges (pixels, outputs); the CP-only plan
  // one at cp > 1 (its gather) and none at cp 1.
  for (int64_t cp : {1, 2}) {
    MeshPlanOptions o = auto_mesh(2, cp);
    const MeshPlan base = make_mesh_plan(kStraggler, o);
    o.exchange_latency_seconds = 0.25;
    const MeshPlan slow = make_mesh_plan(kStraggler, o);
    EXPECT_DOUBLE_EQ(
        slow.choice.mesh.route_seconds - base.choice.mesh.route_seconds, 0.5);
    EXPECT_DOUBLE_EQ(
        slow.choice.cp_only.route_seconds - base.choice.cp_only.route_seconds,
        cp > 1 ? 0.25 : 0.0);
  }
}

TEST(MeshChoice, MinGainIsTheLine) {
  const std::vector<Grid> replicas = {
      {{1, 32, 32}, {1, 32, 32}, {1, 32, 32}}, {{1, 32, 32}}};
  MeshPlanOptions o = auto_mesh(2, 1);
  const double gain = make_mesh_plan(replicas, o).choice.gain();
  ASSERT_GT(gain, 0.1);
  o.min_gain = gain - 1e-3;
  EXPECT_EQ(make_mesh_plan(replicas, o).mode, MeshMode::kMesh);
  o.min_gain = gain + 1e-3;
  EXPECT_EQ(make_mesh_plan(replicas, o).mode, MeshMode::kCpOnly);
  o.min_gain = 1.0;
  expect_contains(
      error_of([&] { make_mesh_plan(replicas, o); }),
      "expected options.min_gain (mesh_min_gain) in [0, 1), got 1");
}

TEST(MeshChoice, TheCpOnlyPlanCutsPagesWithinAReplica) {
  // Equal replicas of one page each at CP 2: the CP-only plan splits each
  // page over its own replica's two ranks.
  const std::vector<Grid> replicas = {{{1, 64, 64}}, {{1, 64, 64}}};
  const MeshPlan mp = make_mesh_plan(replicas, auto_mesh(2, 2, true));
  ASSERT_EQ(mp.mode, MeshMode::kCpOnly);
  ASSERT_TRUE(mp.plan.split);
  EXPECT_EQ(mp.plan.ranks[1].units, (Ints{0}));
  EXPECT_EQ(mp.plan.ranks[2].units, (Ints{1}));
  expect_routes_deliver(mp);
}

TEST(MeshChoice, WithDedupBlocksFollowTheReplicaOfFirstUse) {
  // The same page in both replicas, plus one of replica 1's own: the
  // CP-only plan encodes the shared page on replica 0's rank.
  const std::vector<Grid> replicas = {
      {{1, 32, 32}}, {{1, 32, 32}, {1, 32, 32}}};
  const std::vector<std::vector<UnitKey>> keys = {{{1, 1}}, {{1, 1}, {2, 2}}};
  const MeshPlan mp = make_mesh_plan(replicas, auto_mesh(2, 1), keys);
  ASSERT_FALSE(mp.dedup.identity());
  ASSERT_TRUE(mp.choice.weighed);
  if (mp.mode == MeshMode::kCpOnly) {
    EXPECT_EQ(mp.plan.ranks[0].units, (Ints{0}));
    EXPECT_EQ(mp.plan.ranks[1].units, (Ints{1}));
  }
  // Either way the CP-only prediction counts the shared page's trip to
  // replica 1, the critical replica (its own page and that trip): 256
  // tokens of 8192 bytes.
  EXPECT_EQ(mp.choice.cp_only.route_bytes, 256 * 8192);
}

TEST(MeshPlan, ErrorsNameTheReplicaAndTheField) {
  expect_contains(
      error_of([] {
        make_mesh_plan({{{1, 4, 4}}}, always_shard_mesh(2, 1));
      }),
      "frameshard::make_mesh_plan: expected one grid per replica (dp = 2), "
      "got 1");
  expect_contains(
      error_of([] {
        make_mesh_plan({{{1, 4, 4}}, {{1, 3, 4}}}, always_shard_mesh(2, 1));
      }),
      "frameshard::make_mesh_plan: replica 1: ");
  expect_contains(
      error_of([] { make_mesh_plan({}, always_shard_mesh(0, 1)); }),
      "expected dp in [1, 65536], got 0");
  const MeshPlan mp =
      make_mesh_plan({{{1, 4, 4}}, {}}, always_shard_mesh(2, 1));
  expect_contains(
      error_of([&] { mesh_pixel_route(mp, 2); }),
      "expected a mesh rank in [0, 2), got 2");
}

}  // namespace
}  // namespace frameshard
