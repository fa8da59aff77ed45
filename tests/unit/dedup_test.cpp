// Each distinct frame once (frameshard/dedup.h): the distinct units of a
// grid, the plan over them, the one-to-many routes, and the mesh's dedup
// across replicas.
#include <frameshard/dedup.h>
#include <frameshard/error.h>
#include <frameshard/mesh_plan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "testing/expect_error.h"
#include "testing/plan_options.h"

namespace frameshard {
namespace {

using testing::always_shard;
using testing::always_shard_mesh;
using testing::error_of;
using testing::expect_contains;

using Grid = std::vector<GridThw>;
using Ints = std::vector<int64_t>;
using Keys = std::vector<UnitKey>;

UnitKey key(uint64_t v) {
  return {v, ~v};
}

// One key per unit: ids[i] for unit i.
Keys keys_of(const std::vector<uint64_t>& ids) {
  Keys k;
  for (uint64_t v : ids) {
    k.push_back(key(v));
  }
  return k;
}

// Distinct keys for every unit of `grid`.
Keys all_distinct(const Grid& grid) {
  Keys k;
  uint64_t next = 1;
  for (const FrameUnit& u : expand_frames(grid).units) {
    (void)u;
    k.push_back(key(next++));
  }
  return k;
}

TEST(Dedup, WithoutRepeatsTheGridAndThePlanAreTheOriginals) {
  const Grid grid = {{1, 8, 8}, {4, 4, 8}, {1, 8, 8}, {2, 16, 4}};
  const FrameDedup d = dedup_frames(grid, all_distinct(grid));
  EXPECT_TRUE(d.identity());
  EXPECT_EQ(d.grid, grid);
  EXPECT_TRUE(d.token_source.empty());
  ASSERT_EQ(d.pixel_rows.size(), 1u);
  EXPECT_EQ(
      d.pixel_rows[0], (RowRange{0, expand_frames(grid).total_patch_rows}));
  for (int64_t world : {2, 3}) {
    const ShardPlan a = make_plan(grid, always_shard(world));
    const ShardPlan b = make_plan(d.grid, always_shard(world));
    EXPECT_EQ(a.fingerprint, b.fingerprint);
  }
}

TEST(Dedup, GroupRepeatsKeepOneUnitPerImage) {
  // Two prompts' images, each repeated 4 times (a GRPO group of 4).
  const Grid grid = {
      {1, 8, 8},
      {1, 8, 8},
      {1, 4, 8},
      {1, 8, 8},
      {1, 4, 8},
      {1, 8, 8},
      {1, 4, 8},
      {1, 4, 8}};
  const Keys k = keys_of({7, 7, 9, 7, 9, 7, 9, 9});
  const FrameDedup d = dedup_frames(grid, k);
  EXPECT_FALSE(d.identity());
  EXPECT_EQ(d.units, 8);
  EXPECT_EQ(d.distinct_units, 2);
  EXPECT_EQ(d.grid, (Grid{{1, 8, 8}, {1, 4, 8}}));
  EXPECT_EQ(d.unit_source, (Ints{0, 0, 1, 0, 1, 0, 1, 1}));
  EXPECT_EQ(d.first_use, (Ints{0, 2}));
  EXPECT_EQ(d.distinct_patch_rows, 64 + 32);
  EXPECT_EQ(d.distinct_tokens, 16 + 8);
  EXPECT_EQ(d.tokens, 4 * 16 + 4 * 8);
  // Pixel rows: unit 0 is rows [0, 64), unit 2 rows [128, 160).
  EXPECT_EQ(d.pixel_rows, (std::vector<RowRange>{{0, 64}, {128, 160}}));
  // Use token -> distinct token: unit 3 (tokens 40..55) copies 0..15.
  ASSERT_EQ(static_cast<int64_t>(d.token_source.size()), d.tokens);
  EXPECT_EQ(d.source_token(0), 0);
  EXPECT_EQ(d.source_token(16), 0);
  EXPECT_EQ(d.source_token(32), 16);
  EXPECT_EQ(d.source_token(40), 0);
  EXPECT_EQ(d.source_token(40 + 15), 15);
}

TEST(Dedup, RepeatedFramesInsideAVideoSplitItsRow) {
  // A video of 4 frames whose frames 1 and 3 repeat frames 0 and 2: the
  // distinct frames are 0 and 2, not consecutive, so two rows.
  const Grid grid = {{4, 4, 4}};
  const FrameDedup d = dedup_frames(grid, keys_of({1, 1, 2, 1}));
  EXPECT_EQ(d.grid, (Grid{{1, 4, 4}, {1, 4, 4}}));
  EXPECT_EQ(d.pixel_rows, (std::vector<RowRange>{{0, 16}, {32, 48}}));
  // Consecutive distinct frames of one video stay one row.
  const FrameDedup e =
      dedup_frames({{3, 4, 4}, {3, 4, 4}}, keys_of({1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(e.grid, (Grid{{3, 4, 4}}));
}

TEST(Dedup, AllUnitsEqualLeaveOne) {
  const Grid grid(6, GridThw{1, 8, 8});
  const FrameDedup d = dedup_frames(grid, keys_of({5, 5, 5, 5, 5, 5}));
  EXPECT_EQ(d.distinct_units, 1);
  EXPECT_EQ(d.grid, (Grid{{1, 8, 8}}));
}

TEST(Dedup, EqualKeysOnDifferentShapesRaiseNamingBothUnits) {
  const Grid grid = {{1, 8, 8}, {1, 4, 8}};
  const std::string e = error_of([&] { dedup_frames(grid, keys_of({3, 3})); });
  expect_contains(e, "dedup_frames");
  expect_contains(e, "equal shapes");
  expect_contains(e, "unit 0 (media 0, frame 0, h x w 8 x 8)");
  expect_contains(e, "unit 1 (media 1, frame 0, h x w 4 x 8)");
}

TEST(Dedup, TheWrongNumberOfKeysIsAnError) {
  const std::string e = error_of([&] {
    dedup_frames({{2, 4, 4}}, keys_of({1}));
  });
  expect_contains(e, "expected one key per frame unit (2), got 1");
  const std::string m = error_of([&] {
    media_unit_keys({{2, 4, 4}}, keys_of({1, 2}));
  });
  expect_contains(m, "expected one media key per grid_thw row (1), got 2");
}

TEST(Dedup, MediaKeysShareFramesAcrossItemsButNotInsideAVideo) {
  const Grid grid = {{2, 4, 4}, {2, 4, 4}, {1, 8, 8}};
  const Keys k = media_unit_keys(grid, keys_of({11, 11, 12}));
  ASSERT_EQ(k.size(), 5u);
  EXPECT_EQ(k[0], k[2]);
  EXPECT_EQ(k[1], k[3]);
  EXPECT_NE(k[0], k[1]);
  EXPECT_NE(k[4], k[0]);
  const FrameDedup d = dedup_frames(grid, k);
  EXPECT_EQ(d.grid, (Grid{{2, 4, 4}, {1, 8, 8}}));
}

TEST(Dedup, SourceRowsMapDistinctRowsToTheirFirstUse) {
  const Grid grid = {{1, 4, 4}, {1, 4, 4}, {1, 4, 4}};  // 16 rows each
  const FrameDedup d = dedup_frames(grid, keys_of({1, 1, 2}));
  const FrameSet distinct = expand_frames(d.grid);
  // Distinct rows [8, 24): the second half of unit 0 (rows 8..15) and the
  // first half of the third use unit (rows 32..39).
  EXPECT_EQ(
      source_rows(d, distinct, {8, 24}),
      (std::vector<RowRange>{{8, 16}, {32, 40}}));
}

// Every use token of every rank arrives once, from the rank that encodes
// its distinct unit, and each distinct row crosses to a rank at most once.
void expect_route_delivers(
    const ShardPlan& plan, const FrameDedup& d, const Ints& owner) {
  const int64_t world = plan.options.world;
  UseConsumers uses;
  uses.source = d.token_source;
  uses.first = owner;
  uses.last = owner;
  for (int64_t& o : uses.last) {
    ++o;
  }
  std::vector<OwnerRoute> routes;
  for (int64_t r = 0; r < world; ++r) {
    routes.push_back(route_uses(plan, uses, r));
  }
  for (int64_t r = 0; r < world; ++r) {
    // What r receives from s: s's send rows for r, as distinct tokens.
    std::vector<int64_t> received;
    for (int64_t s = 0; s < world; ++s) {
      const Ints mine = encoded_tokens(plan, s);
      int64_t at = 0;
      for (int64_t dest = 0; dest < r; ++dest) {
        at += routes[s].send_counts[dest];
      }
      EXPECT_EQ(routes[s].send_counts[r], routes[r].recv_counts[s]);
      for (int64_t i = 0; i < routes[s].send_counts[r]; ++i) {
        received.push_back(mine[routes[s].send_order[at + i]]);
      }
    }
    std::set<int64_t> unique(received.begin(), received.end());
    EXPECT_EQ(unique.size(), received.size()) << "rank " << r;
    Ints expect_tokens;
    for (int64_t u = 0; u < d.tokens; ++u) {
      if (owner[u] == r) {
        expect_tokens.push_back(u);
      }
    }
    EXPECT_EQ(routes[r].tokens, expect_tokens);
    ASSERT_EQ(routes[r].recv_order.size(), expect_tokens.size());
    for (size_t i = 0; i < expect_tokens.size(); ++i) {
      EXPECT_EQ(
          received[routes[r].recv_order[i]], d.source_token(expect_tokens[i]));
    }
  }
}

TEST(Dedup, OwnerRoutesSendEachDistinctRowOnceToEachConsumer) {
  const Grid grid = {{1, 8, 8}, {1, 4, 8}, {1, 8, 8}, {1, 4, 8}, {1, 8, 8}};
  const FrameDedup d = dedup_frames(grid, keys_of({1, 2, 1, 2, 1}));
  for (int64_t world : {2, 3}) {
    const ShardPlan plan = make_plan(d.grid, always_shard(world));
    ASSERT_TRUE(plan.sharded());
    Ints owner;
    for (int64_t u = 0; u < d.tokens; ++u) {
      owner.push_back((u * 7 / 5) % world);
    }
    expect_route_delivers(plan, d, owner);
  }
}

TEST(Dedup, RouteUsesRefusesBadConsumers) {
  const Grid grid = {{1, 8, 8}, {1, 8, 8}};
  const FrameDedup d = dedup_frames(grid, keys_of({1, 1}));
  const ShardPlan plan = make_plan({{1, 8, 8}, {1, 8, 8}}, always_shard(2));
  UseConsumers uses{d.token_source, Ints(32, 0), Ints(32, 3)};
  expect_contains(
      error_of([&] { route_uses(plan, uses, 0); }),
      "expected consumer ranks within [0, 2), got [0, 3)");
}

TEST(MeshDedup, AGroupSpreadOverReplicasIsEncodedOnceInTheMesh) {
  // Replica 0 holds images A, B; replica 1 holds B, A, C.
  const std::vector<Grid> replicas = {
      {{1, 8, 8}, {1, 4, 8}}, {{1, 4, 8}, {1, 8, 8}, {1, 8, 4}}};
  const std::vector<Keys> keys = {keys_of({1, 2}), keys_of({2, 1, 3})};
  const MeshPlan mp = make_mesh_plan(replicas, always_shard_mesh(2, 2), keys);
  EXPECT_EQ(mp.dedup.distinct_units, 3);
  EXPECT_EQ(mp.plan.frames.grid, (Grid{{1, 8, 8}, {1, 4, 8}, {1, 8, 4}}));
  // Pixels: every rank receives exactly its distinct rows.
  for (int64_t r = 0; r < 4; ++r) {
    const MeshPixelRoute px = mesh_pixel_route(mp, r);
    int64_t recv = 0;
    for (int64_t c : px.recv_counts) {
      recv += c;
    }
    EXPECT_EQ(recv, mp.plan.ranks[r].real_patch_rows);
  }
  // Outputs: every rank receives its replica's use tokens, each once.
  for (int64_t r = 0; r < 4; ++r) {
    const OwnerRoute out = mesh_output_route(mp, r);
    const int64_t q = r / 2;
    Ints expect;
    for (int64_t t = mp.replica_tokens[q]; t < mp.replica_tokens[q + 1]; ++t) {
      expect.push_back(t);
    }
    EXPECT_EQ(out.tokens, expect);
  }
}

TEST(MeshDedup, WithoutRepeatsTheMeshPlanIsThePlanWithoutDedup) {
  const std::vector<Grid> replicas = {{{1, 8, 8}, {2, 4, 8}}, {{1, 8, 4}}};
  const std::vector<Keys> keys = {all_distinct(replicas[0]), keys_of({99})};
  for (bool split : {false, true}) {
    const MeshPlan a = make_mesh_plan(replicas, always_shard_mesh(2, 2, split));
    const MeshPlan b =
        make_mesh_plan(replicas, always_shard_mesh(2, 2, split), keys);
    EXPECT_EQ(a.plan.fingerprint, b.plan.fingerprint);
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(
          mesh_output_route(a, r).recv_order,
          mesh_output_route(b, r).recv_order);
    }
  }
}

TEST(MeshDedup, KeysMustMatchEachReplicasUnits) {
  const std::vector<Grid> replicas = {{{1, 8, 8}}, {}};
  expect_contains(
      error_of([&] {
        make_mesh_plan(
            replicas, always_shard_mesh(2, 1), {keys_of({1}), keys_of({2})});
      }),
      "expected one key per frame unit of replica 1 (0), got 1");
}

}  // namespace
}  // namespace frameshard
