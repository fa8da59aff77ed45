// The grid_thw and text_tokens fields both manifests read through one path
// (src/io/manifest_fields.h: the training manifest and the dataset
// manifest of analyze and plan --manifest).
#include "io/manifest_fields.h"

#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using json_detail::LineRef;
using testing::error_of;
using testing::expect_contains;

const LineRef kAt{"reader", "m.jsonl:4"};

std::vector<GridThw> grid_of(const std::string& text, int64_t merge = 2) {
  return json_detail::read_grid_thw(nlohmann::json::parse(text), merge, kAt);
}

std::vector<int64_t> runs_of(const std::string& text, std::size_t media) {
  return json_detail::read_text_tokens(nlohmann::json::parse(text), media, kAt);
}

TEST(ManifestFields, AnEmptyGridThwListIsATextOnlySample) {
  EXPECT_TRUE(grid_of("[]").empty());
  EXPECT_EQ(
      grid_of("[[1, 4, 6], [3, 2, 2]]"),
      (std::vector<GridThw>{{1, 4, 6}, {3, 2, 2}}));
  // The merge size is the caller's: h = 3 is a row at merge 3.
  EXPECT_EQ(grid_of("[[1, 3, 6]]", 3), (std::vector<GridThw>{{1, 3, 6}}));
}

TEST(ManifestFields, GridErrorsNameTheRowAndQuoteItAsWritten) {
  expect_contains(
      error_of([] { grid_of("[[1, 4, 4], [1, 27, 28]]"); }),
      "frameshard::reader: m.jsonl:4: grid_thw[1]: expected [t, h, w] with "
      "t >= 1 and h and w positive multiples of 2 (each at most 1048576), "
      "got [1, 27, 28]");
  for (const char* bad :
       {"[[0, 4, 4]]",
        "[[4, 4]]",
        "[[1, 4.0, 4]]",
        "[[1, 4, 4194304]]",
        "[[1, -2, 4]]",
        "[5]"}) {
    SCOPED_TRACE(bad);
    expect_contains(
        error_of([&] { grid_of(bad); }),
        "m.jsonl:4: grid_thw[0]: expected [t, h, w]");
  }
  expect_contains(
      error_of([] { grid_of("{}"); }),
      "m.jsonl:4: grid_thw: expected a list of [t, h, w] rows ([] for a "
      "text-only sample), got {}");
}

TEST(ManifestFields, TextTokensSplitEvenlyEarlierRunsTakingTheRemainder) {
  EXPECT_EQ(runs_of("40", 2), (std::vector<int64_t>{14, 13, 13}));
  EXPECT_EQ(runs_of("512", 0), (std::vector<int64_t>{512}));
  EXPECT_EQ(runs_of("[8, 32]", 1), (std::vector<int64_t>{8, 32}));
  expect_contains(
      error_of([] { runs_of("[1, -2]", 1); }),
      "m.jsonl:4: text_tokens: expected a non-negative integer or a list of "
      "2 non-negative integers (text before each of the 1 media and at the "
      "end), got [1, -2]");
  expect_contains(
      error_of([] { runs_of("[7]", 1); }),
      "text_tokens: expected a non-negative integer or a list of 2");
  expect_contains(
      error_of([] { runs_of("\"9\"", 0); }),
      "text_tokens: expected a non-negative integer or a list of 1 "
      "non-negative integers (text before each of the 0 media and at the "
      "end), got \"9\"");
}

}  // namespace
}  // namespace frameshard
