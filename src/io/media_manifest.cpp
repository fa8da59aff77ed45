// The dataset manifest of analyze and plan --manifest: strict JSON per line
// (json_text.h), every error naming the line, the field, what was expected
// and what was given. grid_thw and text_tokens are read as the training
// manifest reads them (manifest_fields.h).
#include <frameshard/error.h>
#include <frameshard/media_manifest.h>

#include "io/json_text.h"
#include "io/jsonl_lines.h"
#include "io/manifest_fields.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

namespace frameshard {
namespace {

using json_detail::json_excerpt;
using json_detail::LineRef;

[[noreturn]] void line_error(
    const LineRef& at,
    const std::string& field,
    const std::string& expected,
    const nlohmann::json& got) {
  json_detail::line_error(at, field, expected, json_excerpt(got));
}

int64_t read_count(
    const nlohmann::json& v, const LineRef& at, const std::string& field) {
  if (!json_detail::is_manifest_count(v) || v.get<int64_t>() < 1) {
    line_error(
        at,
        field,
        "an integer in [1, " + std::to_string(json_detail::kMaxManifestEntry) +
            "]",
        v);
  }
  return v.get<int64_t>();
}

// Runs `make`, naming the field when the resize rule refuses the value.
template <typename Make>
GridThw resized(const LineRef& at, const std::string& field, Make make) {
  try {
    return make();
  } catch (const Error& e) {
    detail::fail(at.fn, at.where, ": ", field, ": ", e.what());
  }
}

void read_images(
    const nlohmann::json& v,
    const ProcessorRule& rule,
    const LineRef& at,
    MediaSample& s) {
  if (!v.is_array()) {
    line_error(at, "images", "a list of [height, width] in pixels", v);
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string field = "images[" + std::to_string(i) + "]";
    if (!v[i].is_array() || v[i].size() != 2) {
      line_error(at, field, "[height, width] in pixels", v[i]);
    }
    const int64_t h = read_count(v[i][0], at, field + "[0]");
    const int64_t w = read_count(v[i][1], at, field + "[1]");
    s.grid.push_back(
        resized(at, field, [&] { return image_grid(rule, h, w); }));
    s.images += 1;
  }
}

void read_videos(
    const nlohmann::json& v,
    const ProcessorRule& rule,
    const LineRef& at,
    MediaSample& s) {
  const std::string shape =
      R"({"frames": n, "fps": f, "height": h, "width": w})";
  if (!v.is_array()) {
    line_error(at, "videos", "a list of " + shape, v);
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string field = "videos[" + std::to_string(i) + "]";
    const nlohmann::json& o = v[i];
    if (!o.is_object() || o.size() != 4 || !o.contains("frames") ||
        !o.contains("fps") || !o.contains("height") || !o.contains("width")) {
      line_error(at, field, shape, o);
    }
    const int64_t frames = read_count(o["frames"], at, field + ".frames");
    const int64_t h = read_count(o["height"], at, field + ".height");
    const int64_t w = read_count(o["width"], at, field + ".width");
    const nlohmann::json& f = o["fps"];
    if (!f.is_number() || !(f.get<double>() > 0.0) ||
        !std::isfinite(f.get<double>())) {
      line_error(at, field + ".fps", "a number > 0", f);
    }
    const double fps = f.get<double>();
    s.grid.push_back(resized(
        at, field, [&] { return video_grid(rule, frames, fps, h, w); }));
    s.videos += 1;
  }
}

// The keys a line may hold, and none of images, videos, grid_thw and
// text_tokens is an error: such a line says nothing about a sample.
void check_sample_keys(const nlohmann::json& doc, const LineRef& at) {
  bool sample = false;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& k = it.key();
    if (k == "id") {
      if (!it.value().is_string()) {
        line_error(at, "id", "a string", it.value());
      }
    } else if (
        k == "images" || k == "videos" || k == "grid_thw" ||
        k == "text_tokens") {
      sample = true;
    } else {
      line_error(
          at,
          detail::excerpt(k),
          "a known key (images, videos, grid_thw, text_tokens, id)",
          nlohmann::json(k));
    }
  }
  if (!sample) {
    line_error(
        at,
        "",
        "media (images, videos or grid_thw; [] for a text-only sample) or "
        "text_tokens",
        doc);
  }
}

MediaSample read_sample(
    const nlohmann::json& doc, const ProcessorRule& rule, const LineRef& at) {
  check_sample_keys(doc, at);
  MediaSample s;
  // Media order: grid_thw rows, images, videos (nlohmann sorts the keys).
  if (doc.contains("grid_thw")) {
    s.grid = json_detail::read_grid_thw(doc["grid_thw"], rule.merge_size, at);
  }
  if (doc.contains("images")) {
    read_images(doc["images"], rule, at, s);
  }
  if (doc.contains("videos")) {
    read_videos(doc["videos"], rule, at, s);
  }
  // After the media: the runs are counted around every medium, however it
  // was given.
  if (doc.contains("text_tokens")) {
    s.text_runs =
        json_detail::read_text_tokens(doc["text_tokens"], s.grid.size(), at);
  }
  return s;
}

}  // namespace

std::vector<MediaSample> parse_media_manifest(
    const std::string& jsonl,
    const ProcessorRule& rule,
    const std::string& source) {
  const char* fn = "load_media_manifest";
  std::vector<MediaSample> samples;
  json_detail::for_each_jsonl_line(
      fn, jsonl, source, [&](const nlohmann::json& doc, const LineRef& at) {
        samples.push_back(read_sample(doc, rule, at));
      });
  FRAMESHARD_CHECK(
      !samples.empty(),
      fn,
      source.empty() ? "" : source + ": ",
      "expected at least one sample (a JSON object per line), got none");
  return samples;
}

std::vector<MediaSample> load_media_manifest(
    const std::string& path, const ProcessorRule& rule) {
  std::ifstream in(path, std::ios::binary);
  FRAMESHARD_CHECK(
      in.good(),
      "load_media_manifest",
      "expected a readable manifest file, got \"",
      path,
      "\"");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_media_manifest(text.str(), rule, path);
}

int64_t MediaSample::text_tokens() const {
  int64_t total = 0;
  for (int64_t n : text_runs) {
    total += n;
  }
  return total;
}

}  // namespace frameshard
