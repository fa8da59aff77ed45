#include <frameshard/error.h>
#include <frameshard/plan.h>
#include <frameshard/splitmix64.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

// The fingerprint hasher is internal to the core; it is tested here against
// the reference XXH64 so the plan fingerprint is pinned across platforms.
#include "core/fingerprint.h"

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;

using Grid = std::vector<GridThw>;
using Ints = std::vector<int64_t>;

PlanOptions sharding(int64_t world, Partitioner p = Partitioner::kOptimal) {
  PlanOptions o;
  o.world = world;
  o.partitioner = p;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  return o;
}

// Every field of the plan, for determinism checks.
void expect_same_plan(const ShardPlan& a, const ShardPlan& b) {
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.unit_costs, b.unit_costs);
  EXPECT_EQ(a.partition.cuts, b.partition.cuts);
  EXPECT_EQ(a.partition.assignment, b.partition.assignment);
  EXPECT_EQ(a.partition.rank_costs, b.partition.rank_costs);
  EXPECT_EQ(a.gather_counts, b.gather_counts);
  EXPECT_EQ(a.restore_rows, b.restore_rows);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].units, b.ranks[r].units);
    EXPECT_EQ(a.ranks[r].grid, b.ranks[r].grid);
    EXPECT_EQ(a.ranks[r].pixel_ranges, b.ranks[r].pixel_ranges);
    EXPECT_EQ(a.ranks[r].cu_seqlens, b.ranks[r].cu_seqlens);
    EXPECT_EQ(a.ranks[r].pad_frames, b.ranks[r].pad_frames);
    EXPECT_EQ(a.ranks[r].dummy_frames, b.ranks[r].dummy_frames);
  }
}

// Checks every documented relation between the plan's fields, recomputing
// each from the frame units.
void check_plan(const ShardPlan& plan, const Grid& grid, const PlanOptions& o) {
  const FrameSet& fs = plan.frames;
  const int64_t n = static_cast<int64_t>(fs.units.size());
  const int64_t merge = o.layout.spatial_merge_size;
  ASSERT_EQ(plan.ranks.size(), static_cast<size_t>(o.world));
  ASSERT_EQ(plan.gather_counts.size(), static_cast<size_t>(o.world));
  EXPECT_EQ(fs.grid, grid);

  const PolicyDecision d = decide_policy(o.policy, o.world, n, fs.total_tokens);
  EXPECT_EQ(plan.sharded(), d.shard);
  EXPECT_EQ(plan.reason, d.reason);
  ASSERT_EQ(plan.unit_costs.size(), fs.units.size());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(plan.unit_costs[i], o.cost(fs.units[i].patch_rows));
  }

  std::vector<int> seen(static_cast<size_t>(n), 0);
  int64_t gathered_total = 0;
  for (int64_t r = 0; r < o.world; ++r) {
    const RankShard& rs = plan.ranks[r];
    EXPECT_EQ(rs.rank, r);
    EXPECT_TRUE(std::is_sorted(rs.units.begin(), rs.units.end()));
    double cost = 0.0;
    int64_t real_rows = 0;
    int64_t real_tokens = 0;
    std::vector<RowRange> unit_ranges;
    for (int64_t u : rs.units) {
      ASSERT_GE(u, 0);
      ASSERT_LT(u, n);
      seen[u] += 1;
      EXPECT_EQ(plan.partition.assignment[u], r);
      cost += plan.unit_costs[u];
      real_rows += fs.units[u].patch_rows;
      real_tokens += fs.units[u].tokens;
      unit_ranges.push_back(
          {fs.units[u].pixel_offset,
           fs.units[u].pixel_offset + fs.units[u].patch_rows});
    }
    EXPECT_EQ(rs.real_patch_rows, real_rows);
    EXPECT_EQ(rs.real_tokens, real_tokens);
    EXPECT_EQ(plan.gather_counts[r], real_tokens);
    EXPECT_NEAR(rs.cost, cost, 1e-9 * (1.0 + cost));
    gathered_total += real_tokens;

    // Pixel ranges: the units' rows in order, adjacent ranges merged.
    std::vector<int64_t> from_units;
    for (const RowRange& rr : unit_ranges) {
      for (int64_t i = rr.begin; i < rr.end; ++i) {
        from_units.push_back(i);
      }
    }
    std::vector<int64_t> from_ranges;
    for (size_t i = 0; i < rs.pixel_ranges.size(); ++i) {
      const RowRange& rr = rs.pixel_ranges[i];
      EXPECT_GT(rr.size(), 0);
      if (i > 0) {
        EXPECT_NE(rs.pixel_ranges[i - 1].end, rr.begin) << "unmerged ranges";
      }
      for (int64_t row = rr.begin; row < rr.end; ++row) {
        from_ranges.push_back(row);
      }
    }
    EXPECT_EQ(from_ranges, from_units);

    // Grid rows: real rows expand to exactly the rank's units (same media,
    // consecutive frames, maximal), then the floor row, then the dummy.
    const bool dummy = n > 0 && n < o.world && rs.units.empty();
    EXPECT_EQ(rs.dummy_frames, dummy ? 1 : 0);
    const size_t extra = (rs.pad_frames > 0 ? 1 : 0) + (dummy ? 1 : 0);
    ASSERT_GE(rs.grid.size(), extra);
    const size_t real_rows_count = rs.grid.size() - extra;
    size_t next = 0;
    for (size_t g = 0; g < real_rows_count; ++g) {
      const GridThw& row = rs.grid[g];
      ASSERT_GT(row.t, 0);
      for (int64_t f = 0; f < row.t; ++f) {
        ASSERT_LT(next, rs.units.size());
        const FrameUnit& u = fs.units[rs.units[next]];
        EXPECT_EQ(u.h, row.h);
        EXPECT_EQ(u.w, row.w);
        if (f > 0) {
          const FrameUnit& prev = fs.units[rs.units[next - 1]];
          EXPECT_EQ(u.media, prev.media);
          EXPECT_EQ(u.frame, prev.frame + 1);
        } else if (next > 0) {
          const FrameUnit& prev = fs.units[rs.units[next - 1]];
          EXPECT_FALSE(u.media == prev.media && u.frame == prev.frame + 1)
              << "mergeable frames left in separate rows";
        }
        ++next;
      }
    }
    EXPECT_EQ(next, rs.units.size());

    // Floor frames: only on ranks with real frames, the fewest frames of
    // the last real frame's size that reach the floor.
    if (!rs.units.empty()) {
      const FrameUnit& last = fs.units[rs.units.back()];
      const int64_t expected_pad =
          real_rows >= o.min_local_patch_rows
              ? 0
              : (o.min_local_patch_rows - real_rows + last.patch_rows - 1) /
                    last.patch_rows;
      EXPECT_EQ(rs.pad_frames, expected_pad);
      if (expected_pad > 0) {
        EXPECT_EQ(
            rs.grid[real_rows_count], (GridThw{expected_pad, last.h, last.w}));
        EXPECT_GE(rs.local_patch_rows, o.min_local_patch_rows);
        EXPECT_LT(
            rs.local_patch_rows - last.patch_rows, o.min_local_patch_rows);
      }
    } else {
      EXPECT_EQ(rs.pad_frames, 0);
    }
    if (dummy) {
      EXPECT_EQ(rs.grid.back(), (GridThw{1, merge, merge}));
    }

    // cu_seqlens: one entry per frame (real, floor, dummy) from the grid.
    Ints cu{0};
    int64_t tokens = 0;
    for (const GridThw& row : rs.grid) {
      for (int64_t f = 0; f < row.t; ++f) {
        cu.push_back(cu.back() + row.h * row.w);
      }
      tokens += row.t * row.h * row.w / (merge * merge);
    }
    EXPECT_EQ(rs.cu_seqlens, cu);
    EXPECT_EQ(rs.local_patch_rows, cu.back());
    EXPECT_EQ(rs.local_tokens, tokens);
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(seen[i], 1) << "unit " << i;
  }
  EXPECT_EQ(gathered_total, fs.total_tokens);

  // Gather: concatenating each rank's real output rows in rank order and
  // applying restore_rows must give the original token order.
  Ints gathered;
  for (const RankShard& rs : plan.ranks) {
    for (int64_t u : rs.units) {
      for (int64_t t = 0; t < fs.units[u].tokens; ++t) {
        gathered.push_back(fs.units[u].token_offset + t);
      }
    }
  }
  const bool in_order = std::is_sorted(
      plan.partition.assignment.begin(), plan.partition.assignment.end());
  if (in_order) {
    EXPECT_TRUE(plan.restore_rows.empty());
    Ints iota(static_cast<size_t>(fs.total_tokens));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(gathered, iota);
  } else {
    ASSERT_EQ(plan.restore_rows.size(), static_cast<size_t>(fs.total_tokens));
    Ints sorted = plan.restore_rows;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < fs.total_tokens; ++i) {
      ASSERT_EQ(sorted[i], i) << "restore_rows is not a permutation";
      ASSERT_EQ(gathered[plan.restore_rows[i]], i) << "row " << i;
    }
  }
}

// Golden values from the reference implementation (python xxhash 4.1.0,
// xxh64(seed=0) over the words' little-endian bytes).
TEST(Fingerprint, MatchesReferenceXxh64) {
  auto hash = [](int n) {
    internal::Fingerprint fp;
    for (int i = 0; i < n; ++i) {
      fp.add(static_cast<int64_t>(i) * 0x123456789LL - 7);
    }
    return fp.finish();
  };
  EXPECT_EQ(hash(0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(hash(1), 0xa8d154f80f8cba5aULL);
  EXPECT_EQ(hash(4), 0xcf7e937de6f69f33ULL);
  EXPECT_EQ(hash(5), 0x2bdbd2b371923e5fULL);
  EXPECT_EQ(hash(13), 0x74bd9def665e2d00ULL);
}

TEST(FloorPadFrames, AutomodelCases) {
  EXPECT_EQ(floor_pad_frames(4, 4, 96), 23);
  EXPECT_EQ(floor_pad_frames(8, 4, 96), 22);
  EXPECT_EQ(floor_pad_frames(92, 4, 96), 1);
  EXPECT_EQ(floor_pad_frames(96, 4, 96), 0);
  EXPECT_EQ(floor_pad_frames(100, 4, 96), 0);
  EXPECT_EQ(floor_pad_frames(4, 0, 96), 0);
  EXPECT_EQ(floor_pad_frames(4, 4, 0), 0);
  EXPECT_EQ(floor_pad_frames(0, 16, 96), 6);
  EXPECT_EQ(floor_pad_frames(10, 16, 96), 6);
  std::string m = error_of([] { floor_pad_frames(-1, 4, 96); });
  EXPECT_EQ(
      m,
      "frameshard::floor_pad_frames: expected local_patch_rows >= 0, got -1");
  m = error_of([] { floor_pad_frames(4, 4, -96); });
  EXPECT_EQ(
      m,
      "frameshard::floor_pad_frames: expected min_local_patch_rows >= 0, got "
      "-96");
}

TEST(MakePlan, PathNames) {
  EXPECT_EQ(to_string(PlanPath::kSharded), "sharded");
  EXPECT_EQ(to_string(PlanPath::kReplicated), "replicated");
}

TEST(MakePlan, HeaderExample) {
  PlanOptions o;
  o.world = 4;
  o.policy.enabled = true;
  const Grid grid{{1, 64, 64}, {16, 16, 16}};
  ShardPlan plan = make_plan(grid, o);
  EXPECT_TRUE(plan.sharded());
  EXPECT_EQ(plan.reason, "tokens 2048 >= min_tokens 2048");
  EXPECT_EQ(plan.frames.units.size(), 17u);
  check_plan(plan, grid, o);
  // The big image alone (4096 patches) outweighs the 16 video frames.
  EXPECT_EQ(plan.ranks[0].grid, (Grid{{1, 64, 64}}));
  EXPECT_EQ(plan.ranks[0].pixel_ranges, (std::vector<RowRange>{{0, 4096}}));
}

TEST(MakePlan, SingleVideoAcrossTwoAndFourRanks) {
  const Grid grid{{8, 2, 2}};
  PlanOptions o = sharding(2);
  o.min_local_patch_rows = 0;
  ShardPlan p2 = make_plan(grid, o);
  check_plan(p2, grid, o);
  EXPECT_EQ(p2.partition.cuts, (Ints{0, 4, 8}));
  EXPECT_EQ(p2.ranks[0].grid, (Grid{{4, 2, 2}}));
  EXPECT_EQ(p2.ranks[1].grid, (Grid{{4, 2, 2}}));
  EXPECT_EQ(p2.ranks[1].pixel_ranges, (std::vector<RowRange>{{16, 32}}));
  EXPECT_EQ(p2.ranks[1].cu_seqlens, (Ints{0, 4, 8, 12, 16}));
  EXPECT_EQ(p2.gather_counts, (Ints{4, 4}));

  o.world = 4;
  o.min_local_patch_rows = 24;  // Automodel's floor test: 24 local rows
  ShardPlan p4 = make_plan(grid, o);
  check_plan(p4, grid, o);
  EXPECT_EQ(p4.partition.cuts, (Ints{0, 2, 4, 6, 8}));
  for (const RankShard& rs : p4.ranks) {
    EXPECT_EQ(rs.grid, (Grid{{2, 2, 2}, {4, 2, 2}}));
    EXPECT_EQ(rs.real_patch_rows, 8);
    EXPECT_EQ(rs.pad_frames, 4);
    EXPECT_EQ(rs.local_patch_rows, 24);
    EXPECT_EQ(rs.local_tokens, 6);
    EXPECT_EQ(rs.real_tokens, 2);
    EXPECT_EQ(rs.cu_seqlens, (Ints{0, 4, 8, 12, 16, 20, 24}));
  }
  EXPECT_EQ(p4.gather_counts, (Ints{2, 2, 2, 2}));
}

TEST(MakePlan, FloorUsesLastRealFrame) {
  // Default floor 96: one rank gets a 2x2 frame then a 4x4 frame (20 rows),
  // padded with ceil(76 / 16) = 5 frames of 4x4.
  const Grid grid{{1, 2, 2}, {1, 4, 4}, {1, 8, 8}};
  PlanOptions o = sharding(2);
  o.cost = CostModel::from_alpha(0);
  ShardPlan plan = make_plan(grid, o);
  check_plan(plan, grid, o);
  EXPECT_EQ(plan.partition.cuts, (Ints{0, 2, 3}));
  EXPECT_EQ(plan.ranks[0].grid, (Grid{{1, 2, 2}, {1, 4, 4}, {5, 4, 4}}));
  EXPECT_EQ(plan.ranks[0].pixel_ranges, (std::vector<RowRange>{{0, 20}}));
  EXPECT_EQ(plan.ranks[0].local_patch_rows, 100);
  EXPECT_EQ(plan.ranks[1].grid, (Grid{{1, 8, 8}, {1, 8, 8}}));
  EXPECT_EQ(plan.ranks[1].pad_frames, 1);
}

TEST(MakePlan, DummyFramesWhenFewerUnitsThanRanks) {
  for (int64_t world : {4, 8}) {
    for (int64_t units : {1, 2}) {
      const Grid grid(static_cast<size_t>(units), GridThw{1, 4, 4});
      PlanOptions o = sharding(world);
      ShardPlan plan = make_plan(grid, o);
      check_plan(plan, grid, o);
      EXPECT_TRUE(plan.sharded());
      for (int64_t r = 0; r < world; ++r) {
        const RankShard& rs = plan.ranks[r];
        if (r < units) {
          EXPECT_EQ(rs.units, (Ints{r}));
          EXPECT_EQ(rs.dummy_frames, 0);
          EXPECT_EQ(rs.pad_frames, 5);  // 16 rows, floor 96
          EXPECT_EQ(plan.gather_counts[r], 4);
        } else {
          // A dummy-only rank: one (1, 2, 2) frame, never grown by the floor.
          EXPECT_TRUE(rs.units.empty());
          EXPECT_EQ(rs.dummy_frames, 1);
          EXPECT_EQ(rs.pad_frames, 0);
          EXPECT_EQ(rs.grid, (Grid{{1, 2, 2}}));
          EXPECT_EQ(rs.cu_seqlens, (Ints{0, 4}));
          EXPECT_EQ(rs.local_patch_rows, 4);
          EXPECT_EQ(rs.local_tokens, 1);
          EXPECT_EQ(rs.real_tokens, 0);
          EXPECT_TRUE(rs.pixel_ranges.empty());
          EXPECT_EQ(plan.gather_counts[r], 0);
        }
      }
    }
  }
  // The dummy follows the merge size.
  PlanOptions o = sharding(2);
  o.layout.spatial_merge_size = 4;
  ShardPlan plan = make_plan({{1, 8, 8}}, o);
  EXPECT_EQ(plan.ranks[1].grid, (Grid{{1, 4, 4}}));
  EXPECT_EQ(plan.ranks[1].local_tokens, 1);
}

TEST(MakePlan, NoUnits) {
  PlanOptions o = sharding(4);
  ShardPlan plan = make_plan({}, o);
  EXPECT_FALSE(plan.sharded());
  EXPECT_EQ(plan.reason, "no frame units");
  check_plan(plan, {}, o);
  for (const RankShard& rs : plan.ranks) {
    EXPECT_TRUE(rs.grid.empty());
    EXPECT_EQ(rs.dummy_frames, 0);
    EXPECT_EQ(rs.cu_seqlens, (Ints{0}));
  }
  EXPECT_EQ(plan.gather_counts, (Ints{0, 0, 0, 0}));
}

TEST(MakePlan, ReplicatedPathStillPartitions) {
  PlanOptions o;
  o.world = 4;  // policy disabled by default
  const Grid grid{{8, 4, 4}, {1, 16, 16}};
  ShardPlan plan = make_plan(grid, o);
  EXPECT_FALSE(plan.sharded());
  EXPECT_EQ(plan.reason, "disabled");
  EXPECT_EQ(plan.partition.cuts.size(), 5u);
  check_plan(plan, grid, o);
  o.policy.enabled = true;  // 8*4 + 64 = 96 tokens, 9 units: below both
  plan = make_plan(grid, o);
  EXPECT_FALSE(plan.sharded());
  EXPECT_EQ(
      plan.reason, "tokens 96 < min_tokens 2048 and units 9 < min_frames 32");
}

TEST(MakePlan, MediaMergingRules) {
  // Consecutive frames of one video merge; images never merge, even when
  // they have the same size.
  const Grid grid{{3, 2, 2}, {1, 4, 4}, {1, 4, 4}, {2, 2, 2}};
  PlanOptions o = sharding(1);
  ShardPlan plan = make_plan(grid, o);
  check_plan(plan, grid, o);
  EXPECT_EQ(
      plan.ranks[0].grid,
      (Grid{{3, 2, 2}, {1, 4, 4}, {1, 4, 4}, {2, 2, 2}, {11, 2, 2}}));
  EXPECT_EQ(plan.ranks[0].pixel_ranges, (std::vector<RowRange>{{0, 52}}));
}

TEST(MakePlan, LptRestoresOriginalOrder) {
  // Costs 16, 4096, 16, 4096 on 2 ranks: LPT puts the two big images on
  // different ranks, so the gather order differs from the original one.
  const Grid grid{{1, 4, 4}, {1, 64, 64}, {1, 4, 4}, {1, 64, 64}};
  PlanOptions o = sharding(2, Partitioner::kLpt);
  o.min_local_patch_rows = 0;
  ShardPlan plan = make_plan(grid, o);
  check_plan(plan, grid, o);
  EXPECT_EQ(plan.partition.assignment, (Ints{0, 0, 1, 1}));
  EXPECT_TRUE(plan.restore_rows.empty());  // already in order

  // Big, big, small: the small image joins the first rank (tie on load,
  // lower rank), out of the original order.
  const Grid grid2{{1, 64, 64}, {1, 64, 64}, {1, 4, 4}};
  plan = make_plan(grid2, o);
  check_plan(plan, grid2, o);
  EXPECT_EQ(plan.partition.assignment, (Ints{0, 1, 0}));
  EXPECT_EQ(plan.ranks[0].units, (Ints{0, 2}));
  EXPECT_EQ(plan.ranks[1].units, (Ints{1}));
  EXPECT_EQ(plan.gather_counts, (Ints{1028, 1024}));
  // Tokens: unit 0 -> [0,1024), 1 -> [1024,2048), 2 -> [2048,2052).
  // Gathered: rank 0 = units 0, 2 then rank 1 = unit 1.
  ASSERT_EQ(plan.restore_rows.size(), 2052u);
  EXPECT_EQ(plan.restore_rows[0], 0);
  EXPECT_EQ(plan.restore_rows[1023], 1023);
  EXPECT_EQ(plan.restore_rows[1024], 1028);
  EXPECT_EQ(plan.restore_rows[2047], 2051);
  EXPECT_EQ(plan.restore_rows[2048], 1024);
  EXPECT_EQ(plan.restore_rows[2051], 1027);
  EXPECT_EQ(
      plan.ranks[0].pixel_ranges,
      (std::vector<RowRange>{{0, 4096}, {8192, 8208}}));
  EXPECT_EQ(plan.ranks[0].grid, (Grid{{1, 64, 64}, {1, 4, 4}}));
}

TEST(MakePlan, RejectsBadOptions) {
  PlanOptions o;
  o.world = 0;
  std::string m = error_of([&] { make_plan({{1, 2, 2}}, o); });
  EXPECT_EQ(m, "frameshard::make_plan: expected options.world >= 1, got 0");
  o.world = 2;
  o.min_local_patch_rows = -1;
  m = error_of([&] { make_plan({{1, 2, 2}}, o); });
  EXPECT_EQ(
      m,
      "frameshard::make_plan: expected options.min_local_patch_rows >= 0, got "
      "-1");
  o.min_local_patch_rows = 0;
  m = error_of([&] { make_plan({{1, 2, 3}}, o); });
  EXPECT_NE(
      m.find("grid_thw[0].w divisible by spatial_merge_size 2, got 3"),
      std::string::npos);
}

TEST(MakePlan, FingerprintTracksWhatRanksMustAgreeOn) {
  const Grid grid{{4, 4, 4}, {1, 16, 16}, {2, 8, 8}};
  PlanOptions o = sharding(3);
  const uint64_t base = make_plan(grid, o).fingerprint;
  EXPECT_EQ(make_plan(grid, o).fingerprint, base);

  std::set<uint64_t> seen{base};
  auto differs = [&](const Grid& g, const PlanOptions& opts, const char* what) {
    const uint64_t fp = make_plan(g, opts).fingerprint;
    EXPECT_TRUE(seen.insert(fp).second) << what;
  };
  differs({{4, 4, 4}, {1, 16, 16}, {2, 8, 6}}, o, "grid w");
  differs({{4, 4, 4}, {1, 16, 16}, {3, 8, 8}}, o, "grid t");
  differs({{1, 16, 16}, {4, 4, 4}, {2, 8, 8}}, o, "grid order");
  PlanOptions o2 = o;
  o2.world = 4;
  differs(grid, o2, "world");
  o2 = o;
  o2.partitioner = Partitioner::kCount;
  differs(grid, o2, "partitioner");
  o2 = o;
  o2.min_local_patch_rows = 200;
  differs(grid, o2, "floor");
  o2 = o;
  o2.policy.enabled = false;
  differs(grid, o2, "path");
  o2 = o;
  o2.layout.temporal_patch_size = 1;
  differs(grid, o2, "layout");
}

// Thousands of random workloads through every partitioner: all plan
// invariants hold, the plan is deterministic, and the fingerprint separates
// distinct plans.
TEST(MakePlan, RandomWorkloadInvariants) {
  SplitMix64 rng(11);
  std::set<uint64_t> fingerprints;
  int distinct_inputs = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    Grid grid;
    const int64_t media = rng.uniform(0, 12);
    for (int64_t m = 0; m < media; ++m) {
      const bool video = rng.uniform(0, 2) == 0;
      grid.push_back(GridThw{
          video ? rng.uniform(2, 24) : 1,
          2 * rng.uniform(1, video ? 12 : 40),
          2 * rng.uniform(1, video ? 12 : 40)});
    }
    PlanOptions o;
    o.world = rng.uniform(1, 9);
    o.partitioner = all_partitioners()[static_cast<size_t>(rng.uniform(0, 3))];
    o.min_local_patch_rows = rng.uniform(0, 2) * 96;
    o.policy.enabled = rng.uniform(0, 4) != 0;
    o.policy.min_tokens = rng.uniform(0, 2) * 1024;
    o.policy.min_frames = rng.uniform(0, 32);
    o.cost = rng.uniform(0, 1) == 0 ? CostModel::from_alpha(0)
                                    : parse_cost_alpha("auto");
    ShardPlan plan = make_plan(grid, o);
    check_plan(plan, grid, o);
    if (::testing::Test::HasFailure()) {
      FAIL() << "trial " << trial;
    }
    expect_same_plan(plan, make_plan(grid, o));
    if (!grid.empty()) {
      ++distinct_inputs;
      fingerprints.insert(plan.fingerprint);
    }
  }
  // Random inputs repeat rarely; fingerprints of distinct plans must not
  // collide, so almost every input gives a new fingerprint.
  EXPECT_GT(
      fingerprints.size(), static_cast<size_t>(distinct_inputs * 95 / 100));
}

}  // namespace
}  // namespace frameshard
