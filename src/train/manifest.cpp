// The JSONL manifest of data_batch.h: one sample per line, strict, every
// error naming the file and line, the field, what was expected and what was
// given (the message shape of frameshard::parse_workload).
#include <frameshard/train/data_batch.h>

#include <frameshard/error.h>

#include "core/json_text.h"
#include "core/jsonl_lines.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include <fstream>
#include <sstream>

namespace frameshard {
namespace train {
namespace {

using json_detail::line_error;
using json_detail::LineRef;

constexpr int64_t kMaxEntry = json_detail::kMaxManifestEntry;
constexpr const char* kGridExpectation =
    "a list of [t, h, w] rows ([] for a text-only sample)";

bool small_non_negative(const nlohmann::json& v) {
  return json_detail::is_manifest_count(v);
}

// The value as written, with ", " between list items: [1, 27, 28].
// A grid row as written ("[1, 27, 28]"); anything else (deeper, longer,
// not numbers) through the bounded core excerpt, so a hostile value never
// makes a huge or deeply recursive message.
std::string json_value_text(const nlohmann::json& v) {
  const bool short_numbers =
      v.is_array() && v.size() <= 8 &&
      std::all_of(v.begin(), v.end(), [](const nlohmann::json& x) {
        return x.is_number();
      });
  if (!short_numbers) {
    return json_detail::json_excerpt(v);
  }
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += (i ? ", " : "") + v[i].dump();
  }
  return out + "]";
}

std::vector<GridThw> read_grid(
    const nlohmann::json& v, const MediaLayout& layout, const LineRef& at) {
  // An empty list is a text-only sample: data parallelism must survive a
  // replica whose batch holds no media (runtime/mesh_encode.h).
  if (!v.is_array()) {
    line_error(at, "grid_thw", kGridExpectation, json_value_text(v));
  }
  const int64_t m = layout.spatial_merge_size;
  const std::string row_rule =
      "[t, h, w] with t >= 1 and h and w positive multiples of " +
      std::to_string(m) + " (each at most " + std::to_string(kMaxEntry) + ")";
  std::vector<GridThw> grid;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& row = v[i];
    bool ok = row.is_array() && row.size() == 3;
    for (std::size_t j = 0; ok && j < 3; ++j) {
      ok = small_non_negative(row[j]);
    }
    GridThw g;
    if (ok) {
      g = {row[0].get<int64_t>(), row[1].get<int64_t>(), row[2].get<int64_t>()};
      ok = g.t >= 1 && g.h >= m && g.w >= m && g.h % m == 0 && g.w % m == 0;
    }
    if (!ok) {
      line_error(
          at,
          "grid_thw[" + std::to_string(i) + "]",
          row_rule,
          json_value_text(row));
    }
    grid.push_back(g);
  }
  return grid;
}

// An integer N (split evenly into media + 1 runs, earlier runs taking the
// remainder) or a list of media + 1 run lengths.
std::vector<int64_t> read_text_runs(
    const nlohmann::json& v, std::size_t media, const LineRef& at) {
  const std::size_t runs = media + 1;
  if (small_non_negative(v)) {
    const auto total = v.get<int64_t>();
    const auto k = static_cast<int64_t>(runs);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < k; ++i) {
      out.push_back(total / k + (i < total % k ? 1 : 0));
    }
    return out;
  }
  bool ok = v.is_array() && v.size() == runs;
  std::vector<int64_t> out;
  for (std::size_t i = 0; ok && i < runs; ++i) {
    ok = small_non_negative(v[i]);
    out.push_back(ok ? v[i].get<int64_t>() : 0);
  }
  if (!ok) {
    line_error(
        at,
        "text_tokens",
        "a non-negative integer or a list of " + std::to_string(runs) +
            " non-negative integers (text before each of the " +
            std::to_string(media) + " media and at the end)",
        json_value_text(v));
  }
  return out;
}

ManifestSample read_sample(
    const nlohmann::json& doc, const MediaLayout& layout, const LineRef& at) {
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != "grid_thw" && it.key() != "text_tokens") {
      line_error(
          at,
          frameshard::detail::excerpt(it.key()),
          "a known key (grid_thw, text_tokens)",
          "unknown key " + frameshard::detail::excerpt(it.key()));
    }
  }
  if (!doc.contains("grid_thw")) {
    line_error(at, "grid_thw", kGridExpectation, "nothing");
  }
  ManifestSample s;
  s.grid = read_grid(doc["grid_thw"], layout, at);
  if (doc.contains("text_tokens")) {
    s.text_runs = read_text_runs(doc["text_tokens"], s.grid.size(), at);
  }
  return s;
}

std::vector<ManifestSample> parse_lines(
    const char* fn,
    const std::string& jsonl,
    const MediaLayout& layout,
    const std::string& source) {
  FRAMESHARD_CHECK(
      layout.spatial_merge_size >= 1,
      fn,
      "expected a positive spatial_merge_size, got ",
      layout.spatial_merge_size);
  std::vector<ManifestSample> samples;
  json_detail::for_each_jsonl_line(
      fn,
      jsonl,
      source,
      [&](const nlohmann::json& doc, const LineRef& at) {
        samples.push_back(read_sample(doc, layout, at));
      },
      " ({\"grid_thw\": [[t, h, w], ...], \"text_tokens\": n})");
  if (samples.empty()) {
    frameshard::detail::fail(
        fn,
        source.empty() ? "" : source + ": ",
        "expected at least one sample (a JSON object per line), got none");
  }
  return samples;
}

}  // namespace

std::vector<ManifestSample> parse_manifest(
    const std::string& jsonl,
    const MediaLayout& layout,
    const std::string& source) {
  return parse_lines("train::parse_manifest", jsonl, layout, source);
}

std::vector<ManifestSample> load_manifest(
    const std::string& path, const MediaLayout& layout) {
  std::ifstream in(path, std::ios::binary);
  FRAMESHARD_CHECK(
      in.good(),
      "train::load_manifest",
      "expected a readable JSONL manifest, got ",
      path,
      " (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_lines("train::load_manifest", text.str(), layout, path);
}

}  // namespace train
}  // namespace frameshard
