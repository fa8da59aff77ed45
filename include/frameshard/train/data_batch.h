// File: frameshard/train/data_batch.h
//
// The token layout of one training microbatch (one packed sequence per
// DP rank and step), torch-free: which positions hold text and which hold a
// medium's visual tokens, the next-token labels, and the media grids in
// sequence order. Pixel values are drawn by the trainer from the grid: one
// draw per (step, DP rank), or, where media_seed is set (grpo), one draw
// per medium from its seed, so a medium's rows are bit-identical wherever
// it appears.
//
// Sources:
//   * synthetic_batch: a seeded preset workload (frameshard/workload.h)
//     scaled down by data.scale (scale_workload), with data.text_tokens text
//     tokens before each medium and at the end; deterministic in (config,
//     step, dp_rank): each step and each DP rank draws its own preset batch
//     (preset_workload with a seed mixed from data.seed, step and dp_rank by
//     SplitMix64), the same on every machine.
//   * data.preset grpo (GRPO groups: verl and AReaL sample each prompt G
//     times, every sample carrying the prompt's images): each step draws
//     dp_size prompts; prompt p's media are grpo_prompt_workload(seed)
//     (frameshard/workload.h: one huge image among 16 to 64 small frame
//     units, so a group of 8 is about one mixed batch) scaled by
//     data.scale, its seed mixed from data.seed, step and p (and a salt,
//     so a prompt is not the grpo preset's own draw). Each prompt is
//     sampled G = data.group_size times; in the step's prompt-major order
//     sample i is sample i % G of prompt i / G. data.group_order
//     contiguous: replica r packs samples [r G, (r + 1) G) (prompt r's
//     group); spread (verl's sequence-length balancing spreads a group over
//     the DP ranks): replica r packs samples r, r + dp, r + 2 dp, ... (G
//     of them), so every group is spread over all replicas. At dp 1 both
//     are the same. Text as above (data.text_tokens before each medium and
//     at the end of the pack, drawn per step and replica); media_seed[m] is
//     mixed from the prompt's seed and m's index in the prompt, the same in
//     every sample and replica that holds it.
//   * a JSONL manifest, one sample per line (blank lines are skipped):
//       {"grid_thw": [[1, 28, 28], [4, 16, 16]], "text_tokens": 40}
//     (40 text tokens split evenly into media + 1 runs, the earlier runs
//     taking the remainder), or explicit text runs around the media
//     (media + 1 entries):
//       {"grid_thw": [[1, 28, 28]], "text_tokens": [8, 32]}
//     or no text_tokens: data.text_tokens before each medium and at the
//     end. "grid_thw": [] is a text-only sample (a replica may draw a
//     step without media). Keys other than grid_thw and text_tokens are
//     rejected. Step s of DP rank r packs data.samples_per_step consecutive
//     samples starting at sample (s * dp_size + r) * samples_per_step
//     (cycling), so DP ranks
//     train on different samples; data.scale applies to their grids too
//     (scale 1 replays them as given). Errors name the file, line, field,
//     expected and actual value:
//       frameshard::train::load_manifest: shapes.jsonl:3: grid_thw[1]:
//       expected [t, h, w] with t >= 1 and h and w positive multiples of 2
//       (each at most 1048576), got [1, 27, 28]
//
// Layout rules: a medium of grid (t, h, w) takes t*h*w/merge^2 positions
// whose token id is kMediaToken; text ids are drawn from [kFirstTextToken,
// vocab); the sequence is padded with kPadToken to a multiple of
// `pad_multiple` (2 * cp_size for the load-balanced CP split).
// labels[i] = tokens[i + 1] when position i + 1 is text, else kIgnoreLabel.
// The text is learnable rather than uniform noise: within a run each id is
// the previous one + 1 (wrapping within the text ids) except at random
// restarts (a quarter of the positions, and each run's first token), so the
// loss falls from ln(vocab) towards about 1.9 and the curves of the two arms
// show a trend to compare.
//
// Usage:
//   frameshard::train::BatchRequest r;
//   r.vocab_size = 256;
//   r.pad_multiple = 4;
//   r.step = step;
//   r.dp_rank = dp_rank;
//   r.dp_size = cfg.parallel.dp_size;
//   auto b = frameshard::train::synthetic_batch(cfg.data, layout, r);
//   auto samples = frameshard::train::load_manifest("shapes.jsonl", layout);
//   auto b2 = frameshard::train::manifest_batch(samples, cfg.data, layout, r);
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
  std::vector<GridThw> grid;           // media in sequence order
  std::vector<int64_t> tokens;         // [seq_len]
  std::vector<int64_t> labels;         // [seq_len]
  std::vector<int64_t> media_offsets;  // first position of each medium
  int64_t media_tokens = 0;            // positions holding kMediaToken
  int64_t text_tokens = 0;             // positions holding text
  /// Per medium, the seed of its pixel rows (grpo: equal for the repeats
  /// of one prompt's medium); empty: the trainer draws the whole batch
  /// from (data.seed, step, dp rank), as for every other source.
  std::vector<uint64_t> media_seed;
  int64_t seq_len() const {
    return static_cast<int64_t>(tokens.size());
  }
};

struct ManifestSample {
  std::vector<GridThw> grid;
  /// Text tokens before each medium and at the end: grid.size() + 1
  /// entries, or none (the line gave no text_tokens: data.text_tokens each).
  std::vector<int64_t> text_runs;
};

/// Which batch to build: the model's token ids, the padding, and the step
/// and DP replica it is for.
struct BatchRequest {
  int64_t vocab_size = 0;    // > kFirstTextToken
  int64_t pad_multiple = 1;  // sequence padded to a multiple (2 * cp_size)
  int64_t step = 0;
  int64_t dp_rank = 0;
  /// Matters to the grpo preset and manifests (dp_rank < dp_size there).
  int64_t dp_size = 1;
};

/// See the banner. Throws frameshard::Error for a bad config (field named).
BatchLayout synthetic_batch(
    const DataConfig& data, const MediaLayout& layout, const BatchRequest& r);

/// Parses JSONL text (`source` names it in errors); every grid row is
/// checked against `layout` (h and w multiples of the merge size, t >= 1).
std::vector<ManifestSample> parse_manifest(
    const std::string& jsonl,
    const MediaLayout& layout,
    const std::string& source = "");
std::vector<ManifestSample> load_manifest(
    const std::string& path, const MediaLayout& layout);

/// One step's sequence from the manifest's samples (see the banner); throws
/// frameshard::Error when it would hold no label (no text after position 0).
BatchLayout manifest_batch(
    const std::vector<ManifestSample>& samples,
    const DataConfig& data,
    const MediaLayout& layout,
    const BatchRequest& r);

}  // namespace train
}  // namespace frameshard
