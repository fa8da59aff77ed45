// !!! Internal header of frameshard::io (also read by train), not
// installed. !!!
//
// The two fields every JSONL manifest line may carry, read by one code path
// so the training manifest (src/train/manifest.cpp, frameshard/train/
// data_batch.h) and the dataset manifest of `analyze` and `plan --manifest`
// (media_manifest.cpp, frameshard/media_manifest.h) cannot disagree on
// them:
//   "grid_thw"     a list of [t, h, w] rows, t >= 1, h and w positive
//                  multiples of the merge size, each at most
//                  kMaxManifestEntry; [] is a text-only sample (no media)
//   "text_tokens"  n, split evenly into media + 1 runs (text before each
//                  medium and at the end; earlier runs take the
//                  remainder), or a list of those media + 1 runs
// Which keys a line may hold and whether grid_thw is required stays with
// each reader. Errors go through line_error (jsonl_lines.h), the value as
// written ("[1, 27, 28]"):
//   frameshard::fn: m.jsonl:3: grid_thw[1]: expected [t, h, w] with t >= 1
//   and h and w positive multiples of 2 (each at most 1048576), got
//   [1, 27, 28]
//
// Usage:
//   std::vector<GridThw> g = read_grid_thw(doc["grid_thw"], 2, at);
//   std::vector<int64_t> runs = read_text_tokens(doc["text_tokens"],
//                                                g.size(), at);
#pragma once

#include <frameshard/frames.h>

#include "io/jsonl_lines.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace json_detail {

/// What a grid_thw value must be, for the "expected" part of an error.
constexpr const char* kGridThwExpectation =
    "a list of [t, h, w] rows ([] for a text-only sample)";

/// The rows of a grid_thw value (empty: a text-only sample); a row outside
/// the rule for `merge_size` (>= 1) or another value is a line_error.
std::vector<GridThw> read_grid_thw(
    const nlohmann::json& v, int64_t merge_size, const LineRef& at);

/// The media + 1 text runs of a text_tokens value for a line of `media`
/// media; another value is a line_error.
std::vector<int64_t> read_text_tokens(
    const nlohmann::json& v, std::size_t media, const LineRef& at);

/// A value for the "got" part of a manifest error: a short list of numbers
/// as written ("[1, 27, 28]"), anything else as json_excerpt (bounded).
std::string manifest_value_text(const nlohmann::json& v);

}  // namespace json_detail
}  // namespace frameshard
