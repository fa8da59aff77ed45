#include <frameshard/error.h>
#include <frameshard/partition.h>
#include <frameshard/policy.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

PolicyOptions enabled() {
  PolicyOptions p;
  p.enabled = true;
  return p;
}

TEST(DecidePolicy, HeaderExample) {
  PolicyDecision d = decide_policy(enabled(), 2, 40, 512);
  EXPECT_TRUE(d.shard);
  EXPECT_EQ(d.reason, "units 40 >= min_frames 32");
}

TEST(DecidePolicy, ReplicatedReasons) {
  PolicyDecision d = decide_policy(PolicyOptions{}, 4, 100, 100000);
  EXPECT_FALSE(d.shard);
  EXPECT_EQ(d.reason, "disabled");
  d = decide_policy(enabled(), 1, 100, 100000);
  EXPECT_FALSE(d.shard);
  EXPECT_EQ(d.reason, "cp_size 1 <= 1");
  d = decide_policy(enabled(), 4, 0, 0);
  EXPECT_FALSE(d.shard);
  EXPECT_EQ(d.reason, "no frame units");
  d = decide_policy(enabled(), 4, 3, 512);
  EXPECT_FALSE(d.shard);
  EXPECT_EQ(
      d.reason, "tokens 512 < min_tokens 2048 and units 3 < min_frames 32");
}

TEST(DecidePolicy, EitherThresholdShards) {
  PolicyDecision d = decide_policy(enabled(), 2, 3, 4096);
  EXPECT_TRUE(d.shard);
  EXPECT_EQ(d.reason, "tokens 4096 >= min_tokens 2048");
  // Exactly at a threshold counts as reaching it.
  EXPECT_TRUE(decide_policy(enabled(), 2, 1, 2048).shard);
  EXPECT_TRUE(decide_policy(enabled(), 2, 32, 1).shard);
  EXPECT_FALSE(decide_policy(enabled(), 2, 31, 2047).shard);
  // A long low-resolution video shards on its frame count.
  PolicyOptions p = enabled();
  p.min_tokens = 999;
  d = decide_policy(p, 8, 32, 32);
  EXPECT_TRUE(d.shard);
  EXPECT_EQ(d.reason, "units 32 >= min_frames 32");
}

TEST(DecidePolicy, ZeroThresholdsShardAnyUnits) {
  PolicyOptions p = enabled();
  p.min_tokens = 0;
  p.min_frames = 0;
  EXPECT_TRUE(decide_policy(p, 2, 1, 1).shard);
  // ... but never with no units or one rank.
  EXPECT_FALSE(decide_policy(p, 2, 0, 0).shard);
  EXPECT_FALSE(decide_policy(p, 1, 10, 10).shard);
}

TEST(DecidePolicy, RejectsNegativeInputs) {
  auto message = [](PolicyOptions p, int64_t cp, int64_t u, int64_t t) {
    try {
      decide_policy(p, cp, u, t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(
      message(enabled(), 0, 1, 1),
      "frameshard::decide_policy: expected cp_size >= 1, got 0");
  EXPECT_EQ(
      message(enabled(), 2, -1, 1),
      "frameshard::decide_policy: expected units >= 0, got -1");
  EXPECT_EQ(
      message(enabled(), 2, 1, -5),
      "frameshard::decide_policy: expected tokens >= 0, got -5");
  PolicyOptions p = enabled();
  p.min_tokens = -1;
  EXPECT_EQ(
      message(p, 2, 1, 1),
      "frameshard::decide_policy: expected min_tokens >= 0, got -1");
  p = enabled();
  p.min_frames = -2;
  EXPECT_EQ(
      message(p, 2, 1, 1),
      "frameshard::decide_policy: expected min_frames >= 0, got -2");
}

}  // namespace
}  // namespace frameshard

// ------------------------------------------------------------- auto policy

namespace frameshard {
namespace {

// Four frames of 32x32 patches (256 tokens each) at a known cost in
// seconds, over two ranks: each rank keeps 512 tokens and receives 512.
struct AutoCase {
  FrameSet frames;
  CostModel cost;
  std::vector<double> unit_costs;
  Partition partition;

  explicit AutoCase(double seconds_per_frame, int64_t world = 2) {
    const std::vector<GridThw> grid(1, GridThw{4, 32, 32});
    frames = expand_frames(grid);
    cost = CostModel::quadratic(0.0, 0.0, seconds_per_frame);
    unit_costs.assign(frames.units.size(), cost(1024));
    partition = partition_costs(unit_costs, world);
  }
};

PolicyOptions auto_policy(double gbps = 25.0) {
  PolicyOptions p;
  p.enabled = true;
  p.kind = PolicyKind::kAuto;
  p.gather_bandwidth_gbps = gbps;
  return p;
}

TEST(AutoPolicy, EstimateFollowsTheFormula) {
  const AutoCase c(1e-3);
  const PolicyEstimate e = estimate_policy(
      auto_policy(), c.cost, c.frames, c.unit_costs, c.partition);
  EXPECT_DOUBLE_EQ(e.replicated_seconds, 4e-3);
  EXPECT_DOUBLE_EQ(e.slowest_seconds, 2e-3);
  EXPECT_DOUBLE_EQ(e.gather_seconds, 512.0 * 8192 / 25e9);  // 0.168 ms
  EXPECT_DOUBLE_EQ(e.saving_seconds(), 2e-3);
}

TEST(AutoPolicy, ShardsWhenTheSavingExceedsTheGather) {
  // Saving 2 ms against a 0.168 ms gather.
  const AutoCase c(1e-3);
  const PolicyDecision d =
      decide_policy(auto_policy(), c.cost, c.frames, c.unit_costs, c.partition);
  EXPECT_TRUE(d.shard);
  EXPECT_EQ(d.reason, "saving 2 ms > gather 0.168 ms");
}

TEST(AutoPolicy, ReplicatesWhenTheGatherCostsMore) {
  // Saving 20 us against the same 0.168 ms gather; the threshold policy
  // would shard these 1024 tokens (min_tokens 0).
  const AutoCase c(1e-5);
  PolicyDecision d =
      decide_policy(auto_policy(), c.cost, c.frames, c.unit_costs, c.partition);
  EXPECT_FALSE(d.shard);
  EXPECT_EQ(d.reason, "saving 0.02 ms <= gather 0.168 ms");
  // Ten times the bandwidth tips it: 20 us > 16.8 us.
  d = decide_policy(
      auto_policy(250.0), c.cost, c.frames, c.unit_costs, c.partition);
  EXPECT_TRUE(d.shard);
}

TEST(AutoPolicy, KeepsTheThresholdPolicysEarlyOuts) {
  const AutoCase one(1.0, 1);
  EXPECT_EQ(
      decide_policy(
          auto_policy(), one.cost, one.frames, one.unit_costs, one.partition)
          .reason,
      "cp_size 1 <= 1");
  PolicyOptions off = auto_policy();
  off.enabled = false;
  const AutoCase c(1.0);
  EXPECT_EQ(
      decide_policy(off, c.cost, c.frames, c.unit_costs, c.partition).reason,
      "disabled");
}

TEST(AutoPolicy, RejectsUnknownUnitsAndBadBandwidth) {
  AutoCase c(1e-3);
  c.cost.seconds_per_unit = 0.0;
  testing::expect_contains(
      testing::error_of([&] {
        estimate_policy(
            auto_policy(), c.cost, c.frames, c.unit_costs, c.partition);
      }),
      "frameshard::estimate_policy: expected a cost model with "
      "seconds_per_unit > 0");
  c.cost.seconds_per_unit = 1.0;
  testing::expect_contains(
      testing::error_of([&] {
        estimate_policy(
            auto_policy(0.0), c.cost, c.frames, c.unit_costs, c.partition);
      }),
      "expected gather_bandwidth_gbps > 0, got 0");
  testing::expect_contains(
      testing::error_of([] { parse_policy_kind("always", "policy"); }),
      "frameshard::parse_policy_kind: policy: expected threshold or auto, "
      "got \"always\"");
}

TEST(AutoPolicy, FlopModelsConvertAtTheAssumedThroughput) {
  // Qwen3-VL: 27 full-attention layers of width 1152.
  const CostModel m = flop_cost_model(tower_preset("qwen3-vl"));
  EXPECT_DOUBLE_EQ(m.seconds_per_unit, 12.0 * 1152 * 27 / 100e12);
}

}  // namespace
}  // namespace frameshard
