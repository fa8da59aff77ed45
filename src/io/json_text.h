// !!! Internal header of frameshard::io (also read by models), not
// installed. !!!
//
// The one JSON reader and renderer for outside input (workload files,
// safetensors headers, config.json, checkpoint indexes):
//   parse_json_strict  refuses nesting deeper than kMaxJsonDepth (checked by
//                      a bracket scan before parsing, so no recursive code
//                      ever sees a deep document), duplicate keys (which
//                      would silently keep the last value) and numbers out
//                      of range (1e400); the problem comes back as text for
//                      the caller's own error wording;
//   json_excerpt       a value for the "got" part of an error: at most
//                      detail::kMaxExcerptChars characters, rendered without
//                      unbounded recursion or allocation.
//
// Usage:
//   nlohmann::json j;
//   std::string problem;
//   if (!json_detail::parse_json_strict(text, j, problem)) {
//     fail(..., "expected JSON in ", path, ", got ", problem);
//   }
//   fail(..., "got ", json_detail::json_excerpt(j["shape"]));
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace frameshard {
namespace json_detail {

/// Deepest nesting of arrays and objects accepted in outside JSON (the
/// files frameshard reads nest 4 levels at most).
constexpr int kMaxJsonDepth = 64;

/// Parses `text` into `out`; false with `problem` set ("nesting deeper than
/// 64 levels at byte 70", "a duplicate key \"a\"", "a parse error: ...").
bool parse_json_strict(
    const std::string& text, nlohmann::json& out, std::string& problem);

/// `v` as compact JSON, cut to detail::kMaxExcerptChars characters.
std::string json_excerpt(const nlohmann::json& v);

}  // namespace json_detail
}  // namespace frameshard
