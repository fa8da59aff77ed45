// Workloads as JSON files (frameshard/workload.h): the strict reader, whose
// errors name the field, expected and actual value, and the writer.
#include <frameshard/workload.h>

#include <frameshard/error.h>

#include "io/json_text.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace frameshard {
namespace {

using json_detail::json_excerpt;

[[noreturn]] void workload_error(
    const std::string& field,
    const std::string& expected,
    const std::string& got,
    const std::string& source) {
  detail::fail(
      "workload",
      detail::excerpt(field),
      ": expected ",
      expected,
      ", got ",
      got,
      source.empty() ? "" : " (in " + source + ")");
}

// Each grid entry is at most 2^20 and a batch at most 2^40 patch rows, so
// no product or sum overflows int64 downstream.
constexpr int64_t kMaxWorkloadEntry = int64_t{1} << 20;
constexpr int64_t kMaxPatches = int64_t{1} << 40;

int64_t read_entry(
    const nlohmann::json& v,
    const std::string& field,
    const std::string& source) {
  if (!v.is_number_integer()) {
    workload_error(field, "an integer", json_excerpt(v), source);
  }
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(kMaxWorkloadEntry)) {
    workload_error(
        field,
        "an integer <= " + std::to_string(kMaxWorkloadEntry),
        json_excerpt(v),
        source);
  }
  const auto x = v.get<int64_t>();
  if (x > kMaxWorkloadEntry) {
    workload_error(
        field,
        "an integer <= " + std::to_string(kMaxWorkloadEntry),
        json_excerpt(v),
        source);
  }
  return x;
}

// The grid_thw rows, each entry and the batch's patch rows bounded.
std::vector<GridThw> read_grid(
    const nlohmann::json& v, const std::string& source) {
  const std::string key = "grid_thw";
  if (!v.is_array()) {
    workload_error(key, "a list of [t, h, w] rows", json_excerpt(v), source);
  }
  std::vector<std::vector<int64_t>> rows;
  int64_t patches = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string row_field = "grid_thw[" + std::to_string(i) + "]";
    if (!v[i].is_array()) {
      workload_error(row_field, "a [t, h, w] row", json_excerpt(v[i]), source);
    }
    std::vector<int64_t> row;
    for (std::size_t j = 0; j < v[i].size(); ++j) {
      row.push_back(read_entry(
          v[i][j], row_field + "[" + std::to_string(j) + "]", source));
    }
    if (row.size() == 3 && row[0] > 0 && row[1] > 0 && row[2] > 0) {
      const int64_t p = row[0] * row[1] * row[2];
      if (p > kMaxPatches || patches > kMaxPatches - p) {
        workload_error(
            row_field,
            "at most " + std::to_string(kMaxPatches) +
                " patch rows in the batch",
            json_excerpt(v[i]),
            source);
      }
      patches += p;
    }
    rows.push_back(std::move(row));
  }
  try {
    return grid_from_rows(rows, "grid_thw");
  } catch (const Error& e) {
    throw Error(
        std::string(e.what()) + (source.empty() ? "" : " (in " + source + ")"));
  }
}

// One unsigned integer per grid row (checked against the rows after the
// whole object is read: the keys may come in any order).
std::vector<uint64_t> read_media_ids(
    const nlohmann::json& v, const std::string& source) {
  if (!v.is_array()) {
    workload_error(
        "media_ids",
        "a list of non-negative integers",
        json_excerpt(v),
        source);
  }
  std::vector<uint64_t> ids;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_unsigned()) {
      workload_error(
          "media_ids[" + std::to_string(i) + "]",
          "a non-negative integer",
          json_excerpt(v[i]),
          source);
    }
    ids.push_back(v[i].get<uint64_t>());
  }
  return ids;
}

}  // namespace

Workload parse_workload(const std::string& json, const std::string& source) {
  nlohmann::json doc;
  std::string problem;
  if (!json_detail::parse_json_strict(json, doc, problem)) {
    workload_error("(document)", "valid JSON", problem, source);
  }
  if (!doc.is_object()) {
    workload_error(
        "(document)",
        "a JSON object {\"grid_thw\": [[t, h, w], ...]}",
        json_excerpt(doc),
        source);
  }
  Workload wl;
  wl.name = source.empty() ? "workload" : source;
  bool has_grid = false;
  bool has_ids = false;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "grid_thw") {
      has_grid = true;
      wl.grid = read_grid(v, source);
    } else if (key == "media_ids") {
      has_ids = true;
      wl.media_ids = read_media_ids(v, source);
    } else if (key == "spatial_merge_size" || key == "temporal_patch_size") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
          v.get<int64_t>() > kMaxWorkloadEntry) {
        workload_error(key, "a positive integer", json_excerpt(v), source);
      }
      (key == "spatial_merge_size" ? wl.layout.spatial_merge_size
                                   : wl.layout.temporal_patch_size) =
          v.get<int64_t>();
    } else {
      workload_error(
          key,
          "a known key (grid_thw, spatial_merge_size, temporal_patch_size, "
          "media_ids)",
          "unknown key " + detail::excerpt(key),
          source);
    }
  }
  if (!has_grid) {
    workload_error(
        "grid_thw", "a non-empty list of [t, h, w] rows", "nothing", source);
  }
  if (has_ids && wl.media_ids.size() != wl.grid.size()) {
    workload_error(
        "media_ids",
        "one id per grid_thw row (" + std::to_string(wl.grid.size()) + ")",
        std::to_string(wl.media_ids.size()) + " ids",
        source);
  }
  // Rejects non-positive sizes and h, w not divisible by the merge size.
  try {
    expand_frames(wl.grid, wl.layout);
  } catch (const Error& e) {
    throw Error(
        std::string(e.what()) + (source.empty() ? "" : " (in " + source + ")"));
  }
  return wl;
}

Workload load_workload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  // A directory opens and reads as empty.
  FRAMESHARD_CHECK(
      in.good() && std::filesystem::is_regular_file(path, ec),
      "load_workload",
      "expected a readable JSON file, got ",
      path,
      " (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_workload(text.str(), path);
}

std::string to_json(const Workload& workload) {
  // One grid row per line keeps hand-edited files readable.
  std::ostringstream os;
  os << "{\n  \"grid_thw\": [";
  for (std::size_t i = 0; i < workload.grid.size(); ++i) {
    const GridThw& g = workload.grid[i];
    os << (i ? ",\n" : "\n") << "    [" << g.t << ", " << g.h << ", " << g.w
       << "]";
  }
  os << "\n  ],\n  \"spatial_merge_size\": "
     << workload.layout.spatial_merge_size
     << ",\n  \"temporal_patch_size\": " << workload.layout.temporal_patch_size;
  if (!workload.media_ids.empty()) {
    os << ",\n  \"media_ids\": [";
    for (std::size_t i = 0; i < workload.media_ids.size(); ++i) {
      os << (i ? ", " : "") << workload.media_ids[i];
    }
    os << "]";
  }
  os << "\n}\n";
  return os.str();
}

}  // namespace frameshard
