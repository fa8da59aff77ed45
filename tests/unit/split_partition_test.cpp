// The split partitioner against brute force on small random batches:
// optimal bottleneck, allowed cuts only, frame boundaries preferred, no
// split when it does not help (frameshard/split_plan.h).
#include <frameshard/plan.h>
#include <frameshard/split_plan.h>
#include <frameshard/splitmix64.h>

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/split_checks.h"

namespace frameshard {
namespace {

using testing::check_split_plan;
using testing::error_of;
using testing::expect_contains;
using testing::relative_gap;
using testing::row_cuts_of;
using testing::split_options;
using testing::SplitModel;

using Grid = std::vector<GridThw>;

struct RandomCase {
  Grid grid;
  PlanOptions options;
  std::string label;
};

// A few frames of 4 to 64 patch rows (merge 2: up to 15 cut positions
// each), world 2 to 4, with and without the constant term, exchange cost
// and window bands.
RandomCase random_case(uint64_t seed) {
  SplitMix64 rng(seed);
  RandomCase c;
  c.options = split_options(rng.uniform(2, 4));
  const int64_t media = rng.uniform(1, 3);
  int64_t units = 0;
  for (int64_t m = 0; m < media && units < 4; ++m) {
    const int64_t t = rng.uniform(1, 4) == 4 ? 2 : 1;
    c.grid.push_back(GridThw{t, 2 * rng.uniform(1, 4), 2 * rng.uniform(1, 4)});
    units += t;
  }
  const double b_values[] = {0.0, 3.0, 20.0};
  const double c_values[] = {0.0, 0.0, 40.0};
  const double e_values[] = {0.0, 2.0, 9.0};
  c.options.cost = CostModel::quadratic(
      1.0, b_values[rng.uniform(0, 2)], c_values[rng.uniform(0, 2)]);
  c.options.split.exchange_row_cost = e_values[rng.uniform(0, 2)];
  const int64_t sides[] = {0, 0, 2, 4};
  c.options.split.window_side = sides[rng.uniform(0, 3)];
  c.label = "seed " + std::to_string(seed) + ": world " +
            std::to_string(c.options.world) + ", window_side " +
            std::to_string(c.options.split.window_side) + ", e " +
            std::to_string(c.options.split.exchange_row_cost);
  return c;
}

TEST(SplitPartition, MatchesTheBruteForceOptimumOnSmallRandomBatches) {
  int split_plans = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const RandomCase c = random_case(seed);
    SCOPED_TRACE(c.label);
    const ShardPlan plan = make_plan(c.grid, c.options);
    const SplitModel model(plan.frames, c.options);
    const double best = model.brute_force_optimum(c.options.world);
    EXPECT_LE(relative_gap(plan.partition.max_cost(), best), 1e-9)
        << plan.partition.max_cost() << " vs brute force " << best;
    if (plan.split) {
      ++split_plans;
      check_split_plan(plan, model);
    } else {
      EXPECT_LE(relative_gap(plan.unsplit_max_cost, best), 1e-9);
    }
  }
  // The cases exercise the split path, not only the fallback.
  EXPECT_GT(split_plans, 150);
}

// Left to right, an interior cut is taken only when no frame boundary after
// the previous cut still allows the optimum (brute force over the rest).
TEST(SplitPartition, CutsAFrameOnlyWhenNoFrameBoundaryReachesTheOptimum) {
  int interior = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const RandomCase c = random_case(seed);
    const ShardPlan plan = make_plan(c.grid, c.options);
    if (!plan.split) {
      continue;
    }
    SCOPED_TRACE(c.label);
    const SplitModel model(plan.frames, c.options);
    const std::vector<int64_t> cuts = row_cuts_of(plan);
    const double best = plan.partition.max_cost();
    std::vector<int64_t> prefix;
    for (int64_t r = 1; r < c.options.world; ++r) {
      const bool boundary = std::any_of(
          plan.frames.units.begin(),
          plan.frames.units.end(),
          [&](const FrameUnit& u) { return u.pixel_offset == cuts[r]; });
      if (!boundary && cuts[r] < plan.frames.total_patch_rows) {
        ++interior;
        for (const FrameUnit& u : plan.frames.units) {
          if (u.pixel_offset <= cuts[r - 1]) {
            continue;
          }
          std::vector<int64_t> with = prefix;
          with.push_back(u.pixel_offset);
          EXPECT_GT(
              model.brute_force_optimum(c.options.world, with),
              best * (1 + 1e-9))
              << "cut " << r << " at row " << cuts[r]
              << " while the boundary at row " << u.pixel_offset
              << " reaches the optimum";
        }
      }
      prefix.push_back(cuts[r]);
    }
  }
  EXPECT_GT(interior, 150);
}

// Batches of up to 40 frames over up to 64 ranks under the default cost
// model: every relation of the ranks holds, and the bottleneck lies between
// the mean and the unsplit optimum.
TEST(SplitPartition, LargerRandomBatchesKeepEveryPlanRelation) {
  int split_plans = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    SplitMix64 rng(1000 + seed);
    PlanOptions o;
    o.world = rng.uniform(2, 64);
    o.policy.enabled = true;
    o.policy.min_tokens = 0;
    o.split.enabled = true;
    o.split.window_side = rng.uniform(0, 1) * 8;
    Grid grid;
    const int64_t media = rng.uniform(1, 12);
    for (int64_t m = 0; m < media; ++m) {
      grid.push_back(GridThw{
          rng.uniform(1, 3) == 3 ? rng.uniform(2, 8) : 1,
          2 * rng.uniform(4, 80),
          2 * rng.uniform(4, 80)});
    }
    SCOPED_TRACE("seed " + std::to_string(seed));
    const ShardPlan plan = make_plan(grid, o);
    const double mean =
        plan.frames.units.empty()
            ? 0.0
            : std::accumulate(
                  plan.unit_costs.begin(), plan.unit_costs.end(), 0.0) /
                  static_cast<double>(o.world);
    EXPECT_GE(plan.partition.max_cost(), mean * (1 - 1e-12));
    EXPECT_LE(plan.partition.max_cost(), plan.unsplit_max_cost);
    if (plan.split) {
      ++split_plans;
      check_split_plan(plan, SplitModel(plan.frames, o));
    }
  }
  EXPECT_GT(split_plans, 30);
}

// A plan that declines to split is exactly the plan with splitting off.
void expect_kept_whole(const Grid& grid, const PlanOptions& o) {
  const ShardPlan plan = make_plan(grid, o);
  EXPECT_FALSE(plan.split);
  PlanOptions off = o;
  off.split.enabled = false;
  EXPECT_EQ(plan.fingerprint, make_plan(grid, off).fingerprint);
}

TEST(SplitPartition, EqualFramesOnEqualRanksAreNotSplit) {
  PlanOptions o = split_options(2);
  const Grid grid{{1, 16, 16}, {1, 16, 16}};
  const ShardPlan plan = make_plan(grid, o);
  EXPECT_FALSE(plan.split);
  PlanOptions off = o;
  off.split.enabled = false;
  const ShardPlan unsplit = make_plan(grid, off);
  EXPECT_EQ(plan.fingerprint, unsplit.fingerprint);
  EXPECT_EQ(plan.partition.cuts, unsplit.partition.cuts);
  EXPECT_EQ(plan.partition.rank_costs, unsplit.partition.rank_costs);
  EXPECT_EQ(plan.unsplit_max_cost, unsplit.partition.max_cost());
  for (const RankShard& r : plan.ranks) {
    EXPECT_TRUE(r.pieces.empty());
    EXPECT_EQ(r.exchange_rows, 0);
  }
}

TEST(SplitPartition, FramesNoDenserThanTheExchangeCostAreNeverSplit) {
  for (int64_t world = 2; world <= 4; ++world) {
    PlanOptions o = split_options(world);
    // Density of a frame of p rows under p^2: p; all are below 1e6.
    o.split.exchange_row_cost = 1e6;
    const Grid grid{{1, 32, 32}, {2, 8, 8}};
    expect_kept_whole(grid, o);
    // Exactly at the density (1024 rows: d = 1024) is not enough either.
    o.split.exchange_row_cost = 1024.0;
    EXPECT_FALSE(make_plan({{1, 32, 32}}, o).split);
    o.split.exchange_row_cost = 1023.0;
    EXPECT_TRUE(make_plan({{1, 32, 32}}, o).split);
  }
}

TEST(SplitPartition, ACutMustBuyAtLeastTheMinimumGain) {
  // One 1024-row frame (cost p^2, density 1024) over 2 ranks: halves cost
  // 512 (1024 + e) against 1024^2 whole, a gain of (1024 - e) / 2048.
  const Grid grid{{1, 32, 32}};
  PlanOptions o = split_options(2, 900.0);  // gain 124 / 2048 = 0.0605
  o.split.min_gain = 0.05;
  EXPECT_TRUE(make_plan(grid, o).split);
  o.split.min_gain = 124.0 / 2048.0;  // exactly the gain: still cut
  EXPECT_TRUE(make_plan(grid, o).split);
  o.split.min_gain = 0.061;
  expect_kept_whole(grid, o);
  // The default asks 5 %: a 3.6 % gain (e = 950) is not worth the exchanges.
  o = split_options(2, 950.0);
  EXPECT_TRUE(make_plan(grid, o).split);
  o.split.min_gain = SplitOptions{}.min_gain;
  EXPECT_EQ(o.split.min_gain, 0.05);
  EXPECT_FALSE(make_plan(grid, o).split);
}

TEST(SplitPartition, TheExchangesFixedLatencyIsPaidBeforeTheMinimumGain) {
  // The frame of ACutMustBuyAtLeastTheMinimumGain: halves at e = 900 gain
  // 6.05 % of 1024^2. A fixed cost F on every rank leaves 6.05 % - F.
  const Grid grid{{1, 32, 32}};
  PlanOptions o = split_options(2, 900.0);
  o.split.min_gain = 0.05;
  const double whole = 1024.0 * 1024.0;
  const SplitPartition free = split_partition(expand_frames(grid), o);
  ASSERT_TRUE(free.split);
  o.split.exchange_fixed_cost = 0.01 * whole;  // 5.05 % left: cut
  const SplitPartition paid = split_partition(expand_frames(grid), o);
  ASSERT_TRUE(paid.split);
  EXPECT_EQ(paid.row_cuts, free.row_cuts);  // the same on every rank
  for (size_t r = 0; r < paid.rank_costs.size(); ++r) {
    EXPECT_DOUBLE_EQ(paid.rank_costs[r], free.rank_costs[r] + 0.01 * whole);
  }
  EXPECT_DOUBLE_EQ(paid.max_cost, free.max_cost + 0.01 * whole);
  EXPECT_EQ(make_plan(grid, o).partition.rank_costs, paid.rank_costs);
  o.split.exchange_fixed_cost = 0.02 * whole;  // 4.05 % left: kept whole
  expect_kept_whole(grid, o);
  // With no minimum gain, a fixed cost above the whole gain keeps it too.
  o.split.min_gain = 0.0;
  o.split.exchange_fixed_cost = 0.07 * whole;
  EXPECT_FALSE(make_plan(grid, o).split);
  o.split.exchange_fixed_cost = 0.06 * whole;
  EXPECT_TRUE(make_plan(grid, o).split);
}

TEST(SplitPartition, NegativeOrNonFiniteFixedCostIsAnError) {
  for (const double f : {-1.0, std::nan(""), HUGE_VAL}) {
    PlanOptions o = split_options(2);
    o.split.exchange_fixed_cost = f;
    expect_contains(
        error_of([&] {
          make_plan({{1, 32, 32}}, o);
        }),
        "expected options.split.exchange_fixed_cost finite and >= 0, got ");
  }
}

TEST(SplitPartition, MinimumGainOutsideZeroToOneIsAnError) {
  for (const double g : {-0.01, 1.0, std::nan("")}) {
    PlanOptions o = split_options(2);
    o.split.min_gain = g;
    const std::string msg = error_of([&] { make_plan({{1, 32, 32}}, o); });
    expect_contains(msg, "expected options.split.min_gain in [0, 1), got ");
  }
}

TEST(SplitPartition, AStandaloneCallAgreesWithThePlan) {
  PlanOptions o = split_options(4);
  o.split.exchange_row_cost = 7.0;
  const Grid grid{{1, 64, 64}, {3, 8, 12}};
  const ShardPlan plan = make_plan(grid, o);
  const SplitPartition sp = split_partition(plan.frames, o);
  ASSERT_TRUE(sp.split);
  EXPECT_EQ(sp.row_cuts, row_cuts_of(plan));
  EXPECT_EQ(sp.rank_costs, plan.partition.rank_costs);
  EXPECT_EQ(sp.unsplit_max_cost, plan.unsplit_max_cost);
  EXPECT_LT(sp.max_cost, sp.unsplit_max_cost);
}

}  // namespace
}  // namespace frameshard
