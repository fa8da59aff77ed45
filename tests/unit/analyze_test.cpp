// The workload analysis of `frameshard analyze` (frameshard/analyze.h).
#include <frameshard/analyze.h>

#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

AnalyzeOptions options(std::vector<int64_t> cps) {
  AnalyzeOptions o;
  o.cps = std::move(cps);
  o.partitioners = {Partitioner::kOptimal};
  o.plan.cost = CostModel::quadratic(0.0, 0.0, 1e-3);  // 1 ms per frame
  o.plan.min_local_patch_rows = 0;
  o.plan.policy.enabled = true;
  o.plan.policy.min_frames = 4;  // threshold: 4 frames shard
  o.plan.policy.min_tokens = 1 << 30;
  return o;
}

TEST(AnalyzeBatches, SumsOverBatchesPerCpSize) {
  // Batch 1: four 32x32 frames (sharded, 4 ms -> 2 ms at CP 2);
  // batch 2: one frame (replicated, 1 ms).
  const std::vector<std::vector<GridThw>> batches = {
      {{4, 32, 32}}, {{1, 32, 32}}};
  const WorkloadAnalysis a = analyze_batches(batches, options({2, 4}));
  EXPECT_EQ(a.batches, 2);
  EXPECT_EQ(a.frame_units, 5);
  EXPECT_EQ(a.tokens, 5 * 256);
  ASSERT_EQ(a.rows.size(), 2u);
  const MethodSummary& cp2 = a.rows[0].methods[0];
  EXPECT_EQ(a.rows[0].cp, 2);
  EXPECT_DOUBLE_EQ(cp2.shard_share, 0.5);
  EXPECT_DOUBLE_EQ(cp2.speedup, 5.0 / 3.0);  // 5 ms -> 2 + 1 ms
  EXPECT_DOUBLE_EQ(cp2.imbalance, 1.0);
  // The slowest receiver gets the other rank's 512 rows of 8192 bytes.
  EXPECT_DOUBLE_EQ(cp2.gather_mb, 512.0 * 8192 / 1e6);
  const double gather_s = 512.0 * 8192 / 25e9;
  EXPECT_DOUBLE_EQ(cp2.speedup_gather, 5e-3 / (3e-3 + gather_s));
  const MethodSummary& cp4 = a.rows[1].methods[0];
  EXPECT_DOUBLE_EQ(cp4.speedup, 5.0 / 2.0);  // 5 ms -> 1 + 1 ms
  EXPECT_DOUBLE_EQ(cp4.gather_mb, 768.0 * 8192 / 1e6);
}

TEST(AnalyzeBatches, NothingShardsGivesOne) {
  AnalyzeOptions o = options({8});
  o.plan.policy.min_frames = 100;
  const WorkloadAnalysis a = analyze_batches({{{4, 32, 32}}}, o);
  EXPECT_DOUBLE_EQ(a.rows[0].methods[0].shard_share, 0.0);
  EXPECT_DOUBLE_EQ(a.rows[0].methods[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(a.rows[0].methods[0].gather_mb, 0.0);
  // Imbalance of what sharding would do: 4 frames on 8 ranks.
  EXPECT_DOUBLE_EQ(a.rows[0].methods[0].imbalance, 2.0);
}

TEST(AnalyzeBatches, BatchesWithoutMediaAddNoCostAndCountAsNotSharded) {
  // The middle batch is text-only samples: no media, nothing to encode.
  const WorkloadAnalysis a =
      analyze_batches({{{4, 32, 32}}, {}, {{1, 32, 32}}}, options({2}));
  EXPECT_EQ(a.batches, 3);
  EXPECT_EQ(a.batches_without_media, 1);
  EXPECT_EQ(a.frame_units, 5);
  const MethodSummary& m = a.rows[0].methods[0];
  EXPECT_DOUBLE_EQ(m.shard_share, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.speedup, 5.0 / 3.0);  // as without the empty batch
  EXPECT_DOUBLE_EQ(m.imbalance, 1.0);
}

TEST(AnalyzeBatches, ImbalanceWithoutShardingIsOverTheBatchesWithMedia) {
  AnalyzeOptions o = options({8});
  o.plan.policy.min_frames = 100;
  // 4 frames on 8 ranks: 2; the text-only batch does not pull it to 1.5.
  const WorkloadAnalysis a = analyze_batches({{{4, 32, 32}}, {}}, o);
  EXPECT_DOUBLE_EQ(a.rows[0].methods[0].imbalance, 2.0);
}

TEST(AnalyzeBatches, OnlyTextOnlyBatchesGiveOnesNotNan) {
  const WorkloadAnalysis a = analyze_batches({{}, {}}, options({2, 4}));
  EXPECT_EQ(a.batches_without_media, 2);
  EXPECT_EQ(a.frame_units, 0);
  for (const CpSummary& row : a.rows) {
    const MethodSummary& m = row.methods[0];
    EXPECT_DOUBLE_EQ(m.shard_share, 0.0);
    EXPECT_DOUBLE_EQ(m.speedup, 1.0);
    EXPECT_DOUBLE_EQ(m.speedup_gather, 1.0);
    EXPECT_DOUBLE_EQ(m.imbalance, 1.0);
    EXPECT_DOUBLE_EQ(m.gather_mb, 0.0);
  }
}

TEST(AnalyzeBatches, RejectsNoBatchesAndBadCp) {
  testing::expect_contains(
      testing::error_of([] { analyze_batches({}, options({2})); }),
      "frameshard::analyze_batches: expected at least one batch, got none");
  testing::expect_contains(
      testing::error_of([] {
        analyze_batches({{{1, 32, 32}}}, options({0}));
      }),
      "expected CP sizes in [1, 65536], got 0");
}

TEST(AnalyzeBatches, RepeatedMediaCountOnceAndDedupPlansTheDistinctUnits) {
  // A group of four samples of one 2-frame video (ids 0) and one image
  // (id 1): 12 frame units, 3 distinct.
  const std::vector<std::vector<GridThw>> batches = {
      {{2, 32, 32},
       {1, 32, 32},
       {2, 32, 32},
       {1, 32, 32},
       {2, 32, 32},
       {1, 32, 32},
       {2, 32, 32},
       {1, 32, 32}}};
  AnalyzeOptions o = options({2});
  o.media_ids = {{0, 1, 0, 1, 0, 1, 0, 1}};
  const WorkloadAnalysis all = analyze_batches(batches, o);
  EXPECT_EQ(all.frame_units, 12);
  EXPECT_EQ(all.distinct_frame_units, 3);
  EXPECT_EQ(all.patch_rows, 12 * 1024);
  EXPECT_EQ(all.distinct_patch_rows, 3 * 1024);
  EXPECT_EQ(all.distinct_tokens, 3 * 256);
  EXPECT_DOUBLE_EQ(all.rows[0].methods[0].speedup, 2.0);  // 12 ms -> 6
  o.dedup = true;  // 3 distinct frames (4 shard): replicated, 3 ms
  const WorkloadAnalysis distinct = analyze_batches(batches, o);
  EXPECT_EQ(distinct.frame_units, 12);  // the uses are still counted
  EXPECT_DOUBLE_EQ(distinct.rows[0].methods[0].shard_share, 0.0);
  o.plan.policy.min_frames = 2;  // now 3 ms -> 2 ms at CP 2
  EXPECT_DOUBLE_EQ(
      analyze_batches(batches, o).rows[0].methods[0].speedup, 3.0 / 2.0);
  // Without ids every row is distinct.
  const WorkloadAnalysis plain = analyze_batches(batches, options({2}));
  EXPECT_EQ(plain.distinct_frame_units, plain.frame_units);
  o.media_ids = {{0, 1}};
  testing::expect_contains(
      testing::error_of([&] { analyze_batches(batches, o); }),
      "frameshard::media_id_unit_keys: expected one media id per grid_thw "
      "row (8), got 2");
  o.media_ids = {{}, {}};
  testing::expect_contains(
      testing::error_of([&] { analyze_batches(batches, o); }),
      "frameshard::analyze_batches: expected media ids for each of the 1 "
      "batches or none, got 2");
}

}  // namespace
}  // namespace frameshard
