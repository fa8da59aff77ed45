#include <frameshard/error.h>
#include <frameshard/frames.h>

#include <gtest/gtest.h>

#include <string>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

TEST(ExpandFrames, HeaderExample) {
  FrameSet fs = expand_frames({{1, 32, 32}, {8, 16, 24}}, MediaLayout{});
  ASSERT_EQ(fs.units.size(), 9u);
  EXPECT_EQ(fs.units[1].pixel_offset, 1024);
  EXPECT_EQ(fs.total_patch_rows, 1024 + 8 * 16 * 24);
  EXPECT_EQ(fs.total_tokens, 256 + 8 * 96);
  EXPECT_EQ(fs.grid.size(), 2u);
}

TEST(ExpandFrames, UnitsAndOffsets) {
  MediaLayout layout;
  layout.spatial_merge_size = 2;
  FrameSet fs = expand_frames({{2, 4, 6}, {1, 2, 2}, {3, 2, 4}}, layout);
  ASSERT_EQ(fs.units.size(), 6u);
  const int64_t media[] = {0, 0, 1, 2, 2, 2};
  const int64_t frame[] = {0, 1, 0, 0, 1, 2};
  const int64_t rows[] = {24, 24, 4, 8, 8, 8};
  int64_t pixel = 0;
  int64_t token = 0;
  for (size_t i = 0; i < fs.units.size(); ++i) {
    const FrameUnit& u = fs.units[i];
    EXPECT_EQ(u.media, media[i]) << i;
    EXPECT_EQ(u.frame, frame[i]) << i;
    EXPECT_EQ(u.patch_rows, rows[i]) << i;
    EXPECT_EQ(u.h * u.w, rows[i]) << i;
    EXPECT_EQ(u.tokens, rows[i] / 4) << i;
    EXPECT_EQ(u.pixel_offset, pixel) << i;
    EXPECT_EQ(u.token_offset, token) << i;
    pixel += u.patch_rows;
    token += u.tokens;
  }
  EXPECT_EQ(fs.total_patch_rows, pixel);
  EXPECT_EQ(fs.total_tokens, token);
}

TEST(ExpandFrames, MergeSizeChangesTokens) {
  MediaLayout layout;
  layout.spatial_merge_size = 4;
  FrameSet fs = expand_frames({{1, 8, 16}}, layout);
  ASSERT_EQ(fs.units.size(), 1u);
  EXPECT_EQ(fs.units[0].tokens, 8);
  layout.spatial_merge_size = 1;
  EXPECT_EQ(expand_frames({{1, 3, 5}}, layout).units[0].tokens, 15);
}

TEST(ExpandFrames, EmptyGridGivesEmptySet) {
  FrameSet fs = expand_frames({});
  EXPECT_TRUE(fs.units.empty());
  EXPECT_EQ(fs.total_patch_rows, 0);
  EXPECT_EQ(fs.total_tokens, 0);
}

TEST(ExpandFrames, RejectsNonPositiveDims) {
  std::string m = error_of([] { expand_frames({{1, 2, 2}, {0, 2, 2}}); });
  expect_contains(m, "frameshard::expand_frames: expected grid_thw[1].t > 0");
  expect_contains(m, "got 0");
  m = error_of([] { expand_frames({{1, -2, 2}}); });
  expect_contains(m, "expected grid_thw[0].h > 0, got -2");
  m = error_of([] { expand_frames({{1, 2, 2}, {1, 2, 2}, {1, 2, 0}}); });
  expect_contains(m, "expected grid_thw[2].w > 0, got 0");
}

TEST(ExpandFrames, RejectsIndivisibleByMerge) {
  std::string m = error_of([] { expand_frames({{1, 3, 2}}); });
  expect_contains(
      m, "expected grid_thw[0].h divisible by spatial_merge_size 2, got 3");
  m = error_of([] { expand_frames({{1, 2, 2}, {2, 4, 6}, {1, 8, 5}}); });
  expect_contains(
      m, "expected grid_thw[2].w divisible by spatial_merge_size 2, got 5");
}

TEST(ExpandFrames, RejectsBadLayout) {
  MediaLayout layout;
  layout.spatial_merge_size = 0;
  std::string m = error_of([&] { expand_frames({{1, 2, 2}}, layout); });
  expect_contains(m, "expected layout.spatial_merge_size > 0, got 0");
  layout.spatial_merge_size = 2;
  layout.temporal_patch_size = -1;
  m = error_of([&] { expand_frames({{1, 2, 2}}, layout); });
  expect_contains(m, "expected layout.temporal_patch_size > 0, got -1");
  // Layout is checked even for an empty grid.
  m = error_of([&] { expand_frames({}, layout); });
  expect_contains(m, "temporal_patch_size");
}

TEST(ExpandFrames, RejectsOverflow) {
  const int64_t big = int64_t{1} << 40;
  std::string m = error_of([&] { expand_frames({{1, big, big}}); });
  expect_contains(m, "grid_thw[0]");
  expect_contains(m, "representable in int64");
}

TEST(CheckPixelRows, AcceptsMatchAndNamesBothNumbers) {
  FrameSet fs = expand_frames({{2, 4, 4}, {1, 2, 6}});
  EXPECT_NO_THROW(check_pixel_rows(fs, 44));
  std::string m = error_of([&] { check_pixel_rows(fs, 40); });
  expect_contains(m, "frameshard::check_pixel_rows: expected");
  expect_contains(m, "= 44");
  expect_contains(m, "got 40");
}

TEST(GridFromRows, ConvertsRows) {
  auto g = grid_from_rows({{1, 2, 4}, {3, 6, 8}});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0], (GridThw{1, 2, 4}));
  EXPECT_EQ(g[1], (GridThw{3, 6, 8}));
  EXPECT_NE(g[0], g[1]);
  EXPECT_EQ(g[1].patches(), 144);
}

TEST(GridFromRows, RejectsEmptyAndRagged) {
  std::string m = error_of([] { grid_from_rows({}); });
  expect_contains(m, "frameshard::grid_from_rows: expected a non-empty");
  expect_contains(m, "grid_thw");
  expect_contains(m, "got an empty list");
  m = error_of([] { grid_from_rows({{1, 2, 2}, {1, 2}}, "video_grid_thw"); });
  expect_contains(m, "video_grid_thw[1] to have 3 entries");
  expect_contains(m, "got 2");
  expect_contains(m, "ragged");
  m = error_of([] { grid_from_rows({{1, 2, 2, 2}}); });
  expect_contains(m, "grid_thw[0] to have 3 entries (t, h, w), got 4");
}

}  // namespace
}  // namespace frameshard
