// The frame_sharding.split_frames key: parse, validation, dotted override,
// round trip and the plan options it sets.
#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/plan.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

const std::string kFsPath = "distributed.multimodal.vision.frame_sharding";

std::string fs_doc(const std::string& fields) {
  return "distributed:\n"
         "  cp_size: 8\n"
         "  multimodal:\n"
         "    vision:\n"
         "      frame_sharding:\n" +
         fields;
}

TEST(SplitFramesConfig, DefaultsToOffAndParsesBooleans) {
  EXPECT_FALSE(Config{}.frame_sharding.split_frames);
  EXPECT_FALSE(plan_options(Config{}).split.enabled);
  const Config on = parse_config(fs_doc("        split_frames: true\n"));
  EXPECT_TRUE(on.frame_sharding.split_frames);
  EXPECT_TRUE(plan_options(on).split.enabled);
  EXPECT_FALSE(parse_config(fs_doc("        split_frames: false\n"))
                   .frame_sharding.split_frames);
}

TEST(SplitFramesConfig, RejectsNonBooleansNamingTheKey) {
  const std::string msg =
      error_of([] { parse_config(fs_doc("        split_frames: 1\n")); });
  expect_contains(msg, kFsPath + ".split_frames: expected");
  expect_contains(msg, "got 1");
}

TEST(SplitFramesConfig, RequiresTheOptimalPartitionerWhereverItIsSet) {
  const std::string expected =
      kFsPath +
      ".split_frames: expected false with partitioner \"greedy\" (frames are "
      "split by the optimal partitioner only), got true";
  // In a file, in either order.
  expect_contains(
      error_of([] {
        parse_config(fs_doc(
            "        split_frames: true\n        partitioner: greedy\n"));
      }),
      expected);
  expect_contains(
      error_of([] {
        parse_config(fs_doc(
            "        partitioner: greedy\n        split_frames: true\n"));
      }),
      expected);
  // By override, either way round; a failed override changes nothing.
  Config c = parse_config(fs_doc("        partitioner: greedy\n"));
  expect_contains(
      error_of([&] { apply_override(c, kFsPath + ".split_frames", "true"); }),
      expected);
  EXPECT_FALSE(c.frame_sharding.split_frames);
  apply_override(c, kFsPath + ".partitioner", "optimal");
  apply_override(c, kFsPath + ".split_frames", "true");
  EXPECT_TRUE(c.frame_sharding.split_frames);
  expect_contains(
      error_of([&] { apply_override(c, kFsPath + ".partitioner", "lpt"); }),
      "with partitioner \"lpt\"");
  EXPECT_EQ(c.frame_sharding.partitioner, "optimal");
  c.frame_sharding.partitioner = "count";
  EXPECT_THROW(validate(c), Error);
}

TEST(SplitFramesConfig, OverridesAndRoundTrips) {
  Config c;
  apply_override(c, kFsPath + ".split_frames", "true");
  EXPECT_TRUE(c.frame_sharding.split_frames);
  apply_override(c, kFsPath, "{split_frames: false}");
  EXPECT_FALSE(c.frame_sharding.split_frames);
  c.frame_sharding.split_frames = true;
  const std::string text = to_yaml(c);
  expect_contains(text, "gather: all\n");
  expect_contains(text, "split_frames: true\n");
  EXPECT_LT(text.find("gather:"), text.find("split_frames:"));
  EXPECT_LT(text.find("split_frames:"), text.find("tower:"));
  EXPECT_TRUE(parse_config(text).frame_sharding.split_frames);
  EXPECT_EQ(to_yaml(parse_config(text)), text);
}

TEST(SplitFramesConfig, ExchangeCostIsANonNegativeIntegerWithALimit) {
  EXPECT_EQ(plan_options(Config{}).split.exchange_row_cost, 1000.0);
  Config c;
  apply_override(c, kFsPath + ".split_exchange_cost", "0");
  EXPECT_EQ(plan_options(c).split.exchange_row_cost, 0.0);
  expect_contains(
      error_of(
          [&] { apply_override(c, kFsPath + ".split_exchange_cost", "-1"); }),
      kFsPath + ".split_exchange_cost: expected");
  expect_contains(
      error_of([] {
        parse_config(fs_doc("        split_exchange_cost: 2199023255553\n"));
      }),
      "got 2199023255553");
  EXPECT_EQ(c.frame_sharding.split_exchange_cost, 0);
}

TEST(SplitFramesConfig, MinimumGainIsAFractionBelowOne) {
  EXPECT_EQ(plan_options(Config{}).split.min_gain, 0.05);
  expect_contains(to_yaml(Config{}), "split_min_gain: 0.05\n");
  Config c;
  apply_override(c, kFsPath + ".split_min_gain", "0");
  EXPECT_EQ(plan_options(c).split.min_gain, 0.0);
  apply_override(c, kFsPath + ".split_min_gain", "0.2");
  EXPECT_EQ(plan_options(c).split.min_gain, 0.2);
  for (const std::string bad : {"1", "-0.1", "true", "[0.1]", "nan", "5%"}) {
    SCOPED_TRACE(bad);
    Config d;
    expect_contains(
        error_of([&] { apply_override(d, kFsPath + ".split_min_gain", bad); }),
        kFsPath + ".split_min_gain: expected a number in [0, 1), got ");
  }
  expect_contains(
      error_of([] { parse_config(fs_doc("        split_min_gain: 1.5\n")); }),
      "expected a number in [0, 1), got 1.5");
}

TEST(SplitFramesConfig, ExchangeCostFollowsACalibratedCostIntoSeconds) {
  // split_exchange_cost is in FLOP-model units; a calibrated cost counts
  // seconds, so 1000 "units" a row must become 1000 FLOP units' seconds,
  // not 1000 s a row (which made every frame too dear to cut).
  Config c;
  c.frame_sharding.split_frames = true;
  c.frame_sharding.cost_alpha = "quadratic:1e-9,1e-5,1e-3";
  const PlanOptions o = plan_options(c);
  const double flop_seconds =
      flop_cost_model(tower_preset("qwen3-vl")).seconds_per_unit;
  EXPECT_DOUBLE_EQ(o.split.exchange_row_cost, 1000.0 * flop_seconds);
  // In FLOP units it stays as written, whatever the alpha.
  c.frame_sharding.cost_alpha = "1000";
  EXPECT_EQ(plan_options(c).split.exchange_row_cost, 1000.0);
  // The calibrated plan cuts the page that bounds it (at 1000 s a row it
  // did not).
  c.frame_sharding.cost_alpha = "quadratic:1e-9,1e-5,1e-3";
  c.frame_sharding.enabled = true;
  c.frame_sharding.min_tokens = 0;
  PlanOptions cp4 = plan_options(c);
  cp4.world = 4;
  std::vector<GridThw> grid = {{1, 64, 64}};
  for (int i = 0; i < 8; ++i) {
    grid.push_back({1, 16, 16});
  }
  const ShardPlan plan = make_plan(grid, cp4);
  EXPECT_TRUE(plan.split);
}

TEST(SplitFramesConfig, ExchangeLatencyIsMicrosecondsPerFullAttentionLayer) {
  // 50 us by default, times the tower's full-attention layers (Qwen3-VL:
  // 27 of 27; Qwen2.5-VL: 4 of 32), in the cost model's units.
  expect_contains(to_yaml(Config{}), "split_exchange_latency_us: 50\n");
  const double flop_seconds =
      flop_cost_model(tower_preset("qwen3-vl")).seconds_per_unit;
  EXPECT_DOUBLE_EQ(
      plan_options(Config{}).split.exchange_fixed_cost,
      50e-6 * 27 / flop_seconds);
  Config c;
  c.frame_sharding.cost_alpha = "quadratic:1e-9,1e-5,1e-3";  // seconds
  EXPECT_DOUBLE_EQ(plan_options(c).split.exchange_fixed_cost, 50e-6 * 27);
  c.frame_sharding.tower = "qwen2.5-vl";
  EXPECT_DOUBLE_EQ(plan_options(c).split.exchange_fixed_cost, 50e-6 * 4);
  apply_override(c, kFsPath + ".split_exchange_latency_us", "2500.5");
  EXPECT_DOUBLE_EQ(plan_options(c).split.exchange_fixed_cost, 2500.5e-6 * 4);
  apply_override(c, kFsPath + ".split_exchange_latency_us", "0");
  EXPECT_EQ(plan_options(c).split.exchange_fixed_cost, 0.0);
  EXPECT_EQ(
      parse_config(to_yaml(c)).frame_sharding.split_exchange_latency_us, 0.0);
  for (const std::string bad : {"-1", "nan", "inf", "true", "50us"}) {
    SCOPED_TRACE(bad);
    Config d;
    expect_contains(
        error_of([&] {
          apply_override(d, kFsPath + ".split_exchange_latency_us", bad);
        }),
        kFsPath + ".split_exchange_latency_us: expected a number >= 0, got ");
  }
}

TEST(SplitFramesConfig, WindowTowersCutOnWindowRows) {
  Config c;
  c.frame_sharding.split_frames = true;
  EXPECT_EQ(plan_options(c).split.window_side, 0);  // qwen3-vl: full attention
  c.frame_sharding.tower = "qwen2.5-vl";
  EXPECT_EQ(plan_options(c).split.window_side, 8);  // 112 px / 14 px
  c.frame_sharding.tower = "qwen2-vl";
  EXPECT_EQ(plan_options(c).split.window_side, 0);
}

}  // namespace
}  // namespace frameshard
