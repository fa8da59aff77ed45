// The analyze manifest (frameshard/media_manifest.h).
#include <frameshard/media_manifest.h>

#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

const ProcessorRule& q2() {
  return processor_rule("qwen2-vl");
}

TEST(MediaManifest, ImagesVideosAndGridRows) {
  const std::vector<MediaSample> s = parse_media_manifest(
      "{\"images\": [[1080, 1920]]}\n"
      "\n"
      "{\"id\": \"v\", \"videos\": [{\"frames\": 300, \"fps\": 30, "
      "\"height\": 480, \"width\": 640}], \"grid_thw\": [[1, 4, 4]], "
      "\"text_tokens\": 40}\n",
      q2());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].grid, (std::vector<GridThw>{{1, 78, 138}}));
  EXPECT_EQ(s[0].images, 1);
  // grid_thw rows first, then images, then videos.
  EXPECT_EQ(s[1].grid, (std::vector<GridThw>{{1, 4, 4}, {10, 34, 46}}));
  EXPECT_EQ(s[1].videos, 1);
}

TEST(MediaManifest, ErrorsNameLineFieldExpectedAndActual) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"images\": [[0, 5]]}",
       "m.jsonl:1: images[0][0]: expected an integer in [1, 1048576], got 0"},
      {"{\"images\": [[5, 2000]]}",
       "m.jsonl:1: images[0]: frameshard::smart_resize: expected an aspect "
       "ratio <= 200"},
      {"{\"videos\": [{\"frames\": 10, \"fps\": \"30\", \"height\": 4, "
       "\"width\": 4}]}",
       "m.jsonl:1: videos[0].fps: expected a number > 0, got \"30\""},
      {"{\"videos\": [{\"frames\": 10}]}",
       "videos[0]: expected {\"frames\": n, \"fps\": f"},
      {"{\"grid_thw\": [[1, 3, 4]]}",
       "grid_thw[0]: expected [t, h, w] with t >= 1 and h and w positive "
       "multiples of 2"},
      {"{\"audio\": 1}", "audio: expected a known key (images, videos"},
      {"{}",
       "expected media (images, videos or grid_thw; [] for a text-only "
       "sample) or text_tokens, got {}"},
      {"{\"id\": \"x\"}", "expected media (images, videos or grid_thw"},
      {"{\"grid_thw\": {}}",
       "grid_thw: expected a list of [t, h, w] rows ([] for a text-only "
       "sample), got {}"},
      {"{\"images\": [[480, 640]], \"text_tokens\": [1, 2, 3]}",
       "text_tokens: expected a non-negative integer or a list of 2 "
       "non-negative integers (text before each of the 1 media and at the "
       "end), got [1, 2, 3]"},
      {"{\"grid_thw\": [], \"text_tokens\": -4}",
       "text_tokens: expected a non-negative integer or a list of 1 "
       "non-negative integers"},
      {"[1]", "expected a JSON object per line, got [1]"},
      {"{\"images\": ", "expected a JSON object per line, got invalid JSON"},
  };
  for (const auto& [line, part] : bad) {
    SCOPED_TRACE(line);
    expect_contains(
        error_of([&] { parse_media_manifest(line, q2(), "m.jsonl"); }),
        "frameshard::load_media_manifest: " +
            std::string(part.rfind("m.", 0) == 0 ? "" : "m.jsonl:1: ") + part);
  }
  expect_contains(
      error_of([] { parse_media_manifest("\n\n", q2()); }),
      "expected at least one sample (a JSON object per line), got none");
  expect_contains(
      error_of([] { load_media_manifest("/nonexistent.jsonl", q2()); }),
      "expected a readable manifest file, got \"/nonexistent.jsonl\"");
}

TEST(MediaManifest, TextOnlySampleHasAnEmptyGrid) {
  // The training manifest's spelling, as in examples/recipes/
  // pages_or_text.jsonl.
  const std::vector<MediaSample> s = parse_media_manifest(
      "{\"grid_thw\": [[1, 64, 64]], \"text_tokens\": 64}\n"
      "{\"grid_thw\": [], \"text_tokens\": 512}\n",
      q2());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_FALSE(s[0].text_only());
  EXPECT_TRUE(s[1].text_only());
  EXPECT_TRUE(s[1].grid.empty());
  EXPECT_EQ(s[1].text_runs, (std::vector<int64_t>{512}));
  EXPECT_EQ(s[1].text_tokens(), 512);
}

TEST(MediaManifest, ALineWithTextTokensAndNoMediaKeyIsTextOnly) {
  const std::vector<MediaSample> s = parse_media_manifest(
      "{\"id\": \"chat-3\", \"text_tokens\": 40}\n"
      "{\"images\": [], \"videos\": []}\n",
      q2());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].text_only());
  EXPECT_EQ(s[0].text_tokens(), 40);
  // Empty media lists say "no media" as "grid_thw": [] does.
  EXPECT_TRUE(s[1].text_only());
  EXPECT_TRUE(s[1].text_runs.empty());
  EXPECT_EQ(s[1].text_tokens(), 0);
}

TEST(MediaManifest, TextTokensAreRunsAroundEveryMediumHoweverGiven) {
  // One grid row and one image: three runs, earlier runs taking the
  // remainder, as the training manifest splits them.
  const std::vector<MediaSample> s = parse_media_manifest(
      "{\"grid_thw\": [[1, 4, 4]], \"images\": [[480, 640]], "
      "\"text_tokens\": 8}\n"
      "{\"images\": [[480, 640]], \"text_tokens\": [5, 0]}\n"
      "{\"images\": [[480, 640]]}\n",
      q2());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].text_runs, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(s[0].text_tokens(), 8);
  EXPECT_EQ(s[1].text_runs, (std::vector<int64_t>{5, 0}));
  EXPECT_TRUE(s[2].text_runs.empty());
  EXPECT_FALSE(s[2].text_only());
}

}  // namespace
}  // namespace frameshard
