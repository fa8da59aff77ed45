// File: frameshard/media_manifest.h
//
// A dataset manifest as `frameshard analyze` and `frameshard plan
// --manifest` read it: JSONL, one sample (one training microbatch's media)
// per line, blank lines skipped. The training manifest's lines
// (frameshard/train/data_batch.h: "grid_thw", "text_tokens") are valid here
// too, read by the same code (the two cannot disagree on them); media may
// instead be given by their size before preprocessing, which the processor
// rule turns into grid rows (frameshard/media_resize.h):
//
//   {"images": [[1754, 1241]]}                            height, width px
//   {"videos": [{"frames": 900, "fps": 30, "height": 360, "width": 640}]}
//   {"grid_thw": [[1, 28, 28]], "text_tokens": 40}       already resized
//   {"id": "sample-7", "images": [[480, 640], [512, 512]]}
//   {"grid_thw": [], "text_tokens": 512}                  text only
//   {"id": "chat-3", "text_tokens": 512}                  text only
//
// A sample's grid is its grid_thw rows, then its images, then its videos,
// each in the order given. A sample without media is text-only (an empty
// grid): real data sets mix them with media samples. It may say so as the
// training manifest does ("grid_thw": [], or empty images / videos lists)
// or simply give no media key, as a data set's text line would; a line with
// none of images, videos, grid_thw and text_tokens ({} or only an "id")
// says nothing about a sample and is refused. "text_tokens" is n (split
// evenly into media + 1 runs) or a list of media + 1 runs, as in training;
// "id" (a string) is allowed and not used. The training reader is stricter:
// it takes grid_thw and text_tokens only and requires grid_thw. Errors name
// the file and line, the field, what was expected and what was given:
//   frameshard::load_media_manifest: m.jsonl:3: videos[0].fps: expected a
//   number > 0, got "30"
//
// Usage:
//   auto rule = frameshard::processor_rule("qwen2-vl");
//   std::vector<frameshard::MediaSample> s =
//       frameshard::load_media_manifest("infovqa.jsonl", rule);
//   s[0].text_only();  // no media: nothing for the vision tower
#pragma once

#include <frameshard/frames.h>
#include <frameshard/media_resize.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

struct MediaSample {
  std::vector<GridThw> grid;  // empty: a text-only sample
  int64_t images = 0;         // grid rows from "images"
  int64_t videos = 0;         // grid rows from "videos"
  /// Text tokens before each medium and at the end (grid.size() + 1 runs,
  /// as the training manifest reads "text_tokens"); empty when the line
  /// gives none.
  std::vector<int64_t> text_runs;

  /// No media: the vision tower has nothing to encode for this sample.
  bool text_only() const {
    return grid.empty();
  }
  /// The sum of text_runs (0 when the line gives no text_tokens).
  int64_t text_tokens() const;
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
