// File: frameshard/train/data_batch.h
//
// The token layout of one training microbatch (one packed sequence per
// DP rank and step), torch-free: which positions hold text and which hold a
// medium's visual tokens, the next-token labels, and the media grids in
// sequence order. Pixel values are drawn by the trainer from the grid.
//
// Sources:
//   * synthetic_batch: a seeded preset workload (frameshard/workload.h)
//     scaled down by data.scale, with data.text_tokens text tokens before
//     each medium and at the end; deterministic in (config, step, dp_rank).
//   * a JSONL manifest, one sample per line:
//       {"grid_thw": [[1, 28, 28], [4, 16, 16]], "text_tokens": 40}
//     or explicit text runs around the media (media + 1 entries):
//       {"grid_thw": [[1, 28, 28]], "text_tokens": [8, 32]}
//     data.samples_per_step consecutive samples (cycling) make one step's
//     sequence. Errors name the file, line, field, expected and actual value.
//
// Layout rules: a medium of grid (t, h, w) takes t*h*w/merge^2 positions
// whose token id is kMediaToken; text ids are drawn from [kFirstTextToken,
// vocab); the sequence is padded with kPadToken to a multiple of
// `pad_multiple` (2 * cp_size for the load-balanced CP split).
// labels[i] = tokens[i + 1] when position i + 1 is text, else kIgnoreLabel.
//
// Usage:
//   auto b = frameshard::train::synthetic_batch(cfg.data, layout, 256, 4,
//                                               step, dp_rank);
//   auto samples = frameshard::train::load_manifest("shapes.jsonl", layout);
//   auto b2 = frameshard::train::manifest_batch(samples, cfg.data, layout,
//                                               256, 4, step, dp_rank);
#pragma once

#include <frameshard/frames.h>
#include <frameshard/train/train_config.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace train {

inline constexpr int64_t kPadToken = 0;
inline constexpr int64_t kMediaToken = 1;
inline constexpr int64_t kFirstTextToken = 2;
inline constexpr int64_t kIgnoreLabel = -100;

struct BatchLayout {
  std::vector<GridThw> grid;     // media in sequence order
  std::vector<int64_t> tokens;   // [seq_len]
  std::vector<int64_t> labels;   // [seq_len]
  int64_t media_tokens = 0;      // positions holding kMediaToken
  int64_t text_tokens = 0;       // positions holding text
  int64_t seq_len() const {
    return static_cast<int64_t>(tokens.size());
  }
};

struct ManifestSample {
  std::vector<GridThw> grid;
  std::vector<int64_t> text_runs;  // grid.size() + 1 entries
};

/// See the banner. Throws frameshard::Error for a bad config (field named).
BatchLayout synthetic_batch(
    const DataConfig& data,
    const MediaLayout& layout,
    int64_t vocab_size,
    int64_t pad_multiple,
    int64_t step,
    int64_t dp_rank);

/// Parses JSONL text (`source` names it in errors); every grid row is
/// checked against `layout` (h and w multiples of the merge size, t >= 1).
std::vector<ManifestSample> parse_manifest(
    const std::string& jsonl,
    const MediaLayout& layout,
    const std::string& source = "");
std::vector<ManifestSample> load_manifest(
    const std::string& path, const MediaLayout& layout);

BatchLayout manifest_batch(
    const std::vector<ManifestSample>& samples,
    const DataConfig& data,
    const MediaLayout& layout,
    int64_t vocab_size,
    int64_t pad_multiple,
    int64_t step,
    int64_t dp_rank);

}  // namespace train
}  // namespace frameshard
