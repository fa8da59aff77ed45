// !!! Internal header of frameshard::io (also read by train), not
// installed. !!!
//
// The JSONL manifests' common reading (the training manifest,
// src/train/manifest.cpp, and the analyze manifest, media_manifest.cpp):
// one strict JSON object per line (json_text.h), blank lines skipped, and
// errors naming the file and line, the field, what was expected and what
// was given:
//   frameshard::fn: m.jsonl:3: grid_thw[1]: expected [t, h, w] ..., got [1]
//
// Usage:
//   for_each_jsonl_line(fn, text, "m.jsonl", [&](const nlohmann::json& o,
//                                                const LineRef& at) {
//     if (!o.contains("x")) line_error(at, "x", "a number", "nothing");
//   }, " ({\"x\": n})");
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace frameshard {
namespace json_detail {

/// Largest count a manifest entry may hold: t*h*w and its sums stay in
/// int64 (as in workload files).
constexpr int64_t kMaxManifestEntry = int64_t{1} << 20;

/// Where a line is ("m.jsonl:3" or "line 3") and which function reads it.
struct LineRef {
  const char* fn;
  std::string where;
};

/// "frameshard::<fn>: <where>: <field>: expected <expected>, got <got>"
/// (no "<field>: " when field is empty).
[[noreturn]] void line_error(
    const LineRef& at,
    const std::string& field,
    const std::string& expected,
    const std::string& got);

/// Calls `read` with each non-blank line parsed as a JSON object; invalid
/// JSON or another value is a line_error ("a JSON object per line" +
/// `object_shape`). Returns the number of lines read.
int64_t for_each_jsonl_line(
    const char* fn,
    const std::string& text,
    const std::string& source,
    const std::function<void(const nlohmann::json&, const LineRef&)>& read,
    const std::string& object_shape = "");

/// A non-negative integer <= kMaxManifestEntry.
bool is_manifest_count(const nlohmann::json& v);

}  // namespace json_detail
}  // namespace frameshard
