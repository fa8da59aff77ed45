// The JSONL manifest of data_batch.h: one sample per line, strict (only
// grid_thw and text_tokens, grid_thw required), every error naming the file
// and line, the field, what was expected and what was given (the message
// shape of frameshard::parse_workload). The two fields are read by the
// core's manifest_fields.h, as the dataset manifest of analyze reads them.
#include <frameshard/train/data_batch.h>

#include <frameshard/error.h>

#include "io/jsonl_lines.h"
#include "io/manifest_fields.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace frameshard {
namespace train {
namespace {

using json_detail::line_error;
using json_detail::LineRef;

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
  // Strict where the dataset manifest is lenient: grid_thw is required
  // ([] for a text-only sample), so a line that forgot it fails here.
  if (!doc.contains("grid_thw")) {
    line_error(at, "grid_thw", json_detail::kGridThwExpectation, "nothing");
  }
  ManifestSample s;
  s.grid = json_detail::read_grid_thw(
      doc["grid_thw"], layout.spatial_merge_size, at);
  if (doc.contains("text_tokens")) {
    s.text_runs =
        json_detail::read_text_tokens(doc["text_tokens"], s.grid.size(), at);
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
