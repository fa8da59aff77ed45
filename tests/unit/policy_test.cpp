#include <frameshard/error.h>
#include <frameshard/policy.h>

#include <gtest/gtest.h>

#include <string>

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
