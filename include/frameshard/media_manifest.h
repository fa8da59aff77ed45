// File: frameshard/media_manifest.h
//
// A dataset manifest as `frameshard analyze` reads it: JSONL, one sample
// (one training microbatch's media) per line, blank lines skipped. The
// training manifest's lines (frameshard/train/data_batch.h: "grid_thw",
// "text_tokens") are valid here too; media may instead be given by their
// size before preprocessing, which the processor rule turns into grid rows
// (frameshard/media_resize.h):
//
//   {"images": [[1754, 1241]]}                            height, width px
//   {"videos": [{"frames": 900, "fps": 30, "height": 360, "width": 640}]}
//   {"grid_thw": [[1, 28, 28]], "text_tokens": 40}       already resized
//   {"id": "sample-7", "images": [[480, 640], [512, 512]]}
//
// A sample's grid is its grid_thw rows, then its images, then its videos,
// each in the order given. "id" (a string) and "text_tokens" are allowed
// and not used. Errors name the file and line, the field, what was expected
// and what was given:
//   frameshard::load_media_manifest: m.jsonl:3: videos[0].fps: expected a
//   number > 0, got "30"
//
// Usage:
//   auto rule = frameshard::processor_rule("qwen2-vl");
//   std::vector<frameshard::MediaSample> s =
//       frameshard::load_media_manifest("infovqa.jsonl", rule);
#pragma once

#include <frameshard/frames.h>
#include <frameshard/media_resize.h>

#include <string>
#include <vector>

namespace frameshard {

struct MediaSample {
  std::vector<GridThw> grid;
  int64_t images = 0;
  int64_t videos = 0;
};

/// Parses JSONL text; `source` names it in errors.
std::vector<MediaSample> parse_media_manifest(
    const std::string& jsonl,
    const ProcessorRule& rule,
    const std::string& source = "");

/// Reads and parses a manifest file.
std::vector<MediaSample> load_media_manifest(
    const std::string& path, const ProcessorRule& rule);

}  // namespace frameshard
