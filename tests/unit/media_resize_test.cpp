// The Qwen-VL processors' resize and sampling rules (frameshard/
// media_resize.h). The expected sizes were computed with transformers'
// own smart_resize; tests/python/test_media_resize.py compares on random
// sizes.
#include <frameshard/media_resize.h>

#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

void expect_size(ResizedSize s, int64_t h, int64_t w) {
  EXPECT_EQ(s.height, h);
  EXPECT_EQ(s.width, w);
}

TEST(SmartResize, MatchesTransformers) {
  expect_size(smart_resize(1080, 1920, 28, 3136, 12845056), 1092, 1932);
  expect_size(smart_resize(1080, 1920, 32, 65536, 16777216), 1088, 1920);
  expect_size(smart_resize(8000, 6000, 28, 3136, 12845056), 4116, 3080);
  expect_size(smart_resize(100, 100, 28, 3136, 12845056), 112, 112);
  expect_size(smart_resize(20, 30, 28, 3136, 12845056), 56, 84);
  expect_size(
      smart_resize(480, 640, 28, 128 * 28 * 28, 768 * 28 * 28), 476, 644);
}

TEST(SmartResize, RoundsHalfToEvenAsPython) {
  // 70 / 28 = 2.5: Python's round() gives 2, std::round would give 3.
  expect_size(smart_resize(70, 70, 28, 0, 1000000000), 56, 56);
  // 42 / 28 = 1.5 rounds to 2.
  expect_size(smart_resize(42, 42, 28, 0, 1000000000), 56, 56);
}

TEST(SmartResize, VideoBoundsTheWholeClip) {
  expect_size(
      smart_resize_video(20, 480, 640, 2, 32, 128 * 32 * 32, 768 * 32 * 32),
      160,
      224);
  // A side below the factor is scaled up to it first.
  expect_size(
      smart_resize_video(3, 20, 900, 2, 32, 128 * 32 * 32, 768 * 32 * 32),
      32,
      1440);
}

TEST(SmartResize, RefusesWhatTheProcessorsRefuse) {
  expect_contains(
      error_of([] { smart_resize(10, 2010, 28, 0, 1 << 30); }),
      "frameshard::smart_resize: expected an aspect ratio <= 200");
  expect_contains(
      error_of([] { smart_resize(0, 10, 28, 0, 1 << 30); }),
      "expected height and width in [1, 1048576] pixels, got 0 x 10");
  expect_contains(
      error_of([] { smart_resize_video(1, 64, 64, 2, 32, 0, 1 << 30); }),
      "frameshard::smart_resize_video: expected frames >= the temporal "
      "factor 2, got 1");
}

TEST(ProcessorRule, Families) {
  EXPECT_EQ(processor_rule("qwen2-vl").factor(), 28);
  EXPECT_EQ(processor_rule("qwen2.5-vl").factor(), 28);
  EXPECT_EQ(processor_rule("qwen3-vl").factor(), 32);
  expect_contains(
      error_of([] { processor_rule("llava"); }),
      "frameshard::processor_rule: expected qwen2-vl, qwen2.5-vl or "
      "qwen3-vl, got \"llava\"");
}

TEST(SampledFrames, FollowTheFpsRule) {
  const ProcessorRule& q2 = processor_rule("qwen2-vl");
  const ProcessorRule& q3 = processor_rule("qwen3-vl");
  EXPECT_EQ(sampled_frames(q2, 300, 30.0), 20);  // 10 s at 2 fps
  EXPECT_EQ(sampled_frames(q3, 300, 30.0), 20);
  EXPECT_EQ(sampled_frames(q2, 31, 30.0), 4);       // min_frames
  EXPECT_EQ(sampled_frames(q2, 3, 30.0), 2);        // at most the video's
  EXPECT_EQ(sampled_frames(q3, 3, 30.0), 3);        // Qwen3-VL does not floor
  EXPECT_EQ(sampled_frames(q2, 100000, 1.0), 768);  // max_frames
  EXPECT_EQ(sampled_frames(q3, 1001, 30.0), 66);    // int(66.73)
  EXPECT_EQ(sampled_frames(q2, 1001, 30.0), 66);    // floor to 2
  // transformers' arange(0, 5509, 5509 / 440) has 441 entries.
  EXPECT_EQ(sampled_frames(q2, 5509, 25.0), 441);
  EXPECT_EQ(video_grid(q2, 5509, 25.0, 146, 3781).t, 221);
  expect_contains(
      error_of([&] { sampled_frames(q2, 1, 30.0); }),
      "frameshard::sampled_frames: expected a video that samples at least 2 "
      "frames, got 1 frames at 30 fps (0 sampled)");
  expect_contains(
      error_of([&] { sampled_frames(q2, 10, 0.0); }),
      "expected fps > 0, got 0");
}

TEST(Grids, HeaderExample) {
  const ProcessorRule& rule = processor_rule("qwen2-vl");
  EXPECT_EQ(image_grid(rule, 1080, 1920), (GridThw{1, 78, 138}));
  const GridThw v = video_grid(rule, 300, 30.0, 480, 640);
  EXPECT_EQ(v, (GridThw{10, 34, 46}));
  // Qwen3-VL: 20 frames of 160 x 224 (the clip budget), odd counts pad.
  EXPECT_EQ(
      video_grid(processor_rule("qwen3-vl"), 300, 30.0, 480, 640),
      (GridThw{10, 10, 14}));
  EXPECT_EQ(video_grid(processor_rule("qwen3-vl"), 3, 30.0, 20, 900).t, 2);
}

}  // namespace
}  // namespace frameshard
