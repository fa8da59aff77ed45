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
      {"{}", "expected at least one image, video or grid_thw row, got {}"},
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

}  // namespace
}  // namespace frameshard
