// Split plans (make_plan with options.split.enabled): the ranks' pieces,
// grids, rows, tokens, gather counts, fingerprints, and the option checks.
#include <frameshard/error.h>
#include <frameshard/owner_route.h>
#include <frameshard/plan.h>
#include <frameshard/split_plan.h>

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "testing/expect_error.h"
#include "testing/split_checks.h"

namespace frameshard {
namespace {

using testing::check_split_plan;
using testing::error_of;
using testing::expect_contains;
using testing::split_options;
using testing::SplitModel;

using Grid = std::vector<GridThw>;
using Ints = std::vector<int64_t>;

TEST(SplitPlan, OneFrameIsSpreadOverEveryRankInOrder) {
  for (int64_t world = 2; world <= 4; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    const PlanOptions o = split_options(world, 100.0);
    const ShardPlan plan = make_plan({{1, 64, 64}}, o);
    ASSERT_TRUE(plan.split);
    check_split_plan(plan, SplitModel(plan.frames, o));
    int64_t next = 0;
    for (const RankShard& r : plan.ranks) {
      EXPECT_EQ(r.units, Ints{0});
      EXPECT_EQ(r.grid, (Grid{{1, 64, 64}}));
      ASSERT_EQ(r.pieces.size(), 1u);
      EXPECT_EQ(r.pieces[0].frame, 0);
      EXPECT_EQ(r.pieces[0].begin, next);
      EXPECT_GT(r.pieces[0].end, r.pieces[0].begin);  // no rank is empty
      EXPECT_EQ(r.exchange_rows, 4096 - r.pieces[0].rows());
      EXPECT_EQ(r.dummy_frames, 0);
      EXPECT_EQ(r.cu_seqlens, (Ints{0, r.pieces[0].rows()}));
      EXPECT_EQ(plan.partition.cuts[r.rank], 0);
      next = r.pieces[0].end;
    }
    EXPECT_EQ(next, 4096);
    EXPECT_EQ(plan.partition.assignment, Ints{0});
    EXPECT_EQ(plan.partition.cuts.back(), 1);
    // The pieces cost the same up to one grain of rows.
    EXPECT_LT(plan.partition.imbalance(), 1.01);
  }
}

TEST(SplitPlan, AVideoFrameIsSplitBetweenWholeFramesOfTheSameVideo) {
  // Three equal frames on two ranks: the middle one is cut in half.
  const PlanOptions o = split_options(2);
  const ShardPlan plan = make_plan({{3, 16, 16}}, o);
  ASSERT_TRUE(plan.split);
  check_split_plan(plan, SplitModel(plan.frames, o));
  EXPECT_EQ(plan.ranks[0].units, (Ints{0, 1}));
  EXPECT_EQ(plan.ranks[0].grid, (Grid{{1, 16, 16}, {1, 16, 16}}));
  EXPECT_EQ(plan.ranks[0].pieces, (std::vector<FramePiece>{{1, 0, 128}}));
  EXPECT_EQ(plan.ranks[0].cu_seqlens, (Ints{0, 256, 384}));
  EXPECT_EQ(plan.ranks[0].pixel_ranges, (std::vector<RowRange>{{0, 384}}));
  EXPECT_EQ(plan.ranks[1].units, (Ints{1, 2}));
  EXPECT_EQ(plan.ranks[1].pieces, (std::vector<FramePiece>{{0, 128, 256}}));
  EXPECT_EQ(plan.ranks[1].pixel_ranges, (std::vector<RowRange>{{384, 768}}));
  EXPECT_EQ(plan.gather_counts, (Ints{96, 96}));
  EXPECT_EQ(plan.partition.assignment, (Ints{0, 0, 1}));
  EXPECT_EQ(plan.partition.cuts, (Ints{0, 1, 3}));
  EXPECT_DOUBLE_EQ(plan.partition.max_cost(), 1.5 * 65536);
  EXPECT_DOUBLE_EQ(plan.unsplit_max_cost, 2 * 65536);

  // Four frames on three ranks: whole frames of one video share a grid row.
  const ShardPlan four = make_plan({{4, 16, 16}}, split_options(3));
  ASSERT_TRUE(four.split);
  EXPECT_EQ(four.ranks[0].grid, (Grid{{1, 16, 16}, {1, 16, 16}}));
  EXPECT_EQ(four.ranks[1].grid, (Grid{{1, 16, 16}, {1, 16, 16}}));
  EXPECT_EQ(four.ranks[2].grid, (Grid{{1, 16, 16}, {1, 16, 16}}));
  const ShardPlan five = make_plan({{5, 16, 16}}, split_options(2));
  ASSERT_TRUE(five.split);
  EXPECT_EQ(five.ranks[0].grid, (Grid{{2, 16, 16}, {1, 16, 16}}));
  EXPECT_EQ(five.ranks[1].grid, (Grid{{1, 16, 16}, {2, 16, 16}}));
}

TEST(SplitPlan, WindowBandsCutAtMultiplesOfWindowSideTimesWidth) {
  PlanOptions o = split_options(3, 10.0);
  o.split.window_side = 4;
  // 24 x 12 patches: bands of 4 patch rows are 48 rows; 6 bands.
  const ShardPlan plan = make_plan({{1, 24, 12}, {1, 4, 4}}, o);
  ASSERT_TRUE(plan.split);
  check_split_plan(plan, SplitModel(plan.frames, o));
  for (const RankShard& r : plan.ranks) {
    for (const FramePiece& p : r.pieces) {
      EXPECT_EQ(p.begin % 48, 0) << "rank " << r.rank;
      EXPECT_TRUE(p.end % 48 == 0 || p.end == 288) << "rank " << r.rank;
    }
  }
  // A window side that is not a multiple of the merge size is refused.
  o.split.window_side = 3;
  expect_contains(
      error_of([&] {
        make_plan({{1, 24, 12}}, o);
      }),
      "options.split.window_side >= 0 and a multiple of spatial_merge_size 2"
      ", got 3");
}

TEST(SplitPlan, EmptyRanksGetADummyFrameAndPiecesGetFloorFrames) {
  // 8 rows, grain 4: at most two pieces for four ranks.
  PlanOptions o = split_options(4);
  o.min_local_patch_rows = 96;
  const ShardPlan plan = make_plan({{1, 2, 4}}, o);
  ASSERT_TRUE(plan.split);
  check_split_plan(plan, SplitModel(plan.frames, o));
  EXPECT_EQ(plan.ranks[0].pieces, (std::vector<FramePiece>{{0, 0, 4}}));
  EXPECT_EQ(plan.ranks[1].pieces, (std::vector<FramePiece>{{0, 4, 8}}));
  // ceil((96 - 4) / 8) = 12 floor frames at the frame's resolution.
  EXPECT_EQ(plan.ranks[0].pad_frames, 12);
  EXPECT_EQ(plan.ranks[0].grid, (Grid{{1, 2, 4}, {12, 2, 4}}));
  EXPECT_EQ(plan.ranks[0].local_patch_rows, 100);
  EXPECT_EQ(plan.ranks[0].local_tokens, 25);
  for (int64_t r = 2; r < 4; ++r) {
    EXPECT_TRUE(plan.ranks[r].units.empty());
    EXPECT_EQ(plan.ranks[r].grid, (Grid{{1, 2, 2}}));
    EXPECT_EQ(plan.ranks[r].cu_seqlens, (Ints{0, 4}));
    EXPECT_EQ(plan.ranks[r].dummy_frames, 1);
    EXPECT_EQ(plan.ranks[r].pad_frames, 0);
    EXPECT_EQ(plan.gather_counts[r], 0);
    EXPECT_EQ(plan.partition.cuts[r], 1);
  }
}

TEST(SplitPlan, FingerprintsCoverEveryPiece) {
  const PlanOptions o = split_options(2);
  const ShardPlan plan = make_plan({{1, 32, 32}, {1, 8, 8}}, o);
  ASSERT_TRUE(plan.split);
  EXPECT_EQ(plan.fingerprint, recompute_fingerprint(plan));
  // The same units per rank, one cut moved by a grain.
  ShardPlan moved = plan;
  moved.ranks[0].pieces.back().end += 4;
  moved.ranks[1].pieces.front().begin += 4;
  EXPECT_NE(recompute_fingerprint(moved), plan.fingerprint);
  // Through make_plan: another exchange cost moves the cut.
  const ShardPlan other =
      make_plan({{1, 32, 32}, {1, 8, 8}}, split_options(2, 900.0));
  ASSERT_TRUE(other.split);
  ASSERT_EQ(other.ranks[0].units, plan.ranks[0].units);
  ASSERT_EQ(other.ranks[0].grid, plan.ranks[0].grid);
  ASSERT_NE(other.ranks[0].pieces, plan.ranks[0].pieces);
  EXPECT_NE(other.fingerprint, plan.fingerprint);
  // An unsplit plan's fingerprint does not depend on the split options.
  PlanOptions off = o;
  off.split.enabled = false;
  const ShardPlan a = make_plan({{2, 8, 8}}, off);
  const ShardPlan b = make_plan({{2, 8, 8}}, o);
  EXPECT_FALSE(b.split);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.fingerprint, recompute_fingerprint(a));
}

TEST(SplitPlan, EncodedTokensOfAPieceAreOnlyItsOwn) {
  const PlanOptions o = split_options(2);
  const ShardPlan plan = make_plan({{1, 4, 4}, {1, 16, 16}}, o);
  ASSERT_TRUE(plan.split);
  const std::vector<int64_t> t0 = encoded_tokens(plan, 0);
  const std::vector<int64_t> t1 = encoded_tokens(plan, 1);
  ASSERT_EQ(plan.ranks[0].pieces.size(), 1u);
  const int64_t cut = 4 + plan.ranks[0].pieces[0].end / 4;
  Ints first(static_cast<size_t>(cut));
  std::iota(first.begin(), first.end(), 0);
  Ints second(static_cast<size_t>(68 - cut));
  std::iota(second.begin(), second.end(), cut);
  EXPECT_EQ(t0, first);
  EXPECT_EQ(t1, second);
}

TEST(SplitPlan, OnlyTheShardedPathWithTheOptimalPartitionerSplits) {
  PlanOptions o = split_options(4);
  o.policy.enabled = false;
  const ShardPlan replicated = make_plan({{1, 64, 64}}, o);
  EXPECT_FALSE(replicated.sharded());
  EXPECT_FALSE(replicated.split);
  o.policy.enabled = true;
  o.partitioner = Partitioner::kGreedy;
  expect_contains(
      error_of([&] {
        make_plan({{1, 64, 64}}, o);
      }),
      "options.split.enabled: expected partitioner optimal (frames are split "
      "by the optimal partitioner only), got greedy");
  o.partitioner = Partitioner::kOptimal;
  o.split.exchange_row_cost = -1.0;
  expect_contains(
      error_of([&] {
        make_plan({{1, 64, 64}}, o);
      }),
      "expected options.split.exchange_row_cost finite and >= 0, got -1");
}

TEST(SplitPlan, TheDocPresetShapeBalancesNearOne) {
  // A batch dominated by one large page at cp 8 under the default model.
  PlanOptions o;
  o.world = 8;
  o.policy.enabled = true;
  o.split.enabled = true;
  const ShardPlan plan =
      make_plan({{1, 148, 112}, {1, 40, 60}, {1, 64, 48}, {1, 32, 32}}, o);
  ASSERT_TRUE(plan.split);
  check_split_plan(plan, SplitModel(plan.frames, o));
  EXPECT_GT(plan.unsplit_max_cost / plan.partition.mean_cost(), 2.0);
  EXPECT_LT(plan.partition.imbalance(), 1.10);
}

}  // namespace
}  // namespace frameshard
