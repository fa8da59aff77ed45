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

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

using Grid = std::vector<GridThw>;
using Ints = std::vector<int64_t>;

MeshPlanOptions mesh(int64_t dp, int64_t cp, bool split = false) {
  MeshPlanOptions o;
  o.dp = dp;
  o.cp = cp;
  o.plan.policy.enabled = true;
  o.plan.policy.min_tokens = 0;
  o.plan.policy.min_frames = 0;
  o.plan.min_local_patch_rows = 0;
  o.plan.split.enabled = split;
  return o;
}

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
  const MeshPlan mp = make_mesh_plan(replicas, mesh(3, 2));
  PlanOptions o = mesh(3, 2).plan;
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
  const MeshPlan mp = make_mesh_plan(replicas, mesh(2, 1));
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
  const MeshPlan mp = make_mesh_plan({{}, {}}, mesh(2, 2));
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
  const MeshPlan mp = make_mesh_plan(replicas, mesh(2, 2));
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
  const MeshPlan mp = make_mesh_plan(replicas, mesh(2, 2, true));
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
    const MeshPlan mp = make_mesh_plan(replicas, mesh(3, 2));
    double worst = 0.0;
    for (const Grid& g : replicas) {
      if (g.empty()) {
        continue;
      }
      PlanOptions o = mesh(1, 2).plan;
      o.world = 2;
      worst = std::max(worst, make_plan(g, o).partition.max_cost());
    }
    EXPECT_LE(mp.plan.partition.max_cost(), worst * (1 + 1e-12)) << seed;
  }
}

TEST(MeshPlan, ErrorsNameTheReplicaAndTheField) {
  expect_contains(
      error_of([] {
        make_mesh_plan({{{1, 4, 4}}}, mesh(2, 1));
      }),
      "frameshard::make_mesh_plan: expected one grid per replica (dp = 2), "
      "got 1");
  expect_contains(
      error_of([] {
        make_mesh_plan({{{1, 4, 4}}, {{1, 3, 4}}}, mesh(2, 1));
      }),
      "frameshard::make_mesh_plan: replica 1: ");
  expect_contains(
      error_of([] { make_mesh_plan({}, mesh(0, 1)); }),
      "expected dp in [1, 65536], got 0");
  const MeshPlan mp = make_mesh_plan({{{1, 4, 4}}, {}}, mesh(2, 1));
  expect_contains(
      error_of([&] { mesh_pixel_route(mp, 2); }),
      "expected a mesh rank in [0, 2), got 2");
}

}  // namespace
}  // namespace frameshard
