// File: frameshard/workload.h
//
// Workloads for the command line, benchmarks and tests: a JSON file
// {"grid_thw": [[t, h, w], ...], "spatial_merge_size": 2,
//  "temporal_patch_size": 2} or a seeded synthetic preset drawn from the
// token budgets of Qwen's processor. A preset is one microbatch of one CP
// group (a pack of a few samples; tens to hundreds of frame units):
//   doc    8 to 16 samples of one large image each, 2k to 65k patches
//          (log-uniform)
//   multi  8 samples of 2 to 8 images of 1k to 5k patches (log-uniform)
//   video  1 or 2 videos of 16 to 768 frames (t = frames / 2), 512 to 3072
//          patches per temporal unit, within Qwen's total video budget
//   mixed  1 or 2 huge images (8k to 16k patches) at random positions
//          among 128 to 512 small frames (256 to 1,024 patches) that come as
//          short videos (2 to 16 units) and single images
//   grpo   one GRPO group: a prompt (grpo_prompt_workload: one huge image
//          among 16 to 64 small frame units, drawn as `mixed` draws from
//          the grpo stream) sampled kGrpoPresetGroupSize = 8 times,
//          each sample carrying the prompt's media: the prompt's grid rows
//          8 times over, media_ids marking the repeats (row i of copy c has
//          id i), so frame_sharding.dedup can encode them once
// Image aspect ratios w/h are drawn in [0.5, 2] (rounding to whole merge
// cells can stretch small images slightly). Every generated h and w is a
// multiple of the merge size. The same
// (name, seed) gives the same workload on every machine (own PRNG, no
// std::distribution).
//
// A JSON file may carry "media_ids": one unsigned integer per grid row; rows
// with one id are the same media item (the same pixels), e.g. a prompt's
// images in each of its GRPO samples. No media_ids: every row is distinct
// (nothing known).
//
// Limits of a JSON file: each grid entry at most 2^20, at most 2^40 patch
// rows and 2^20 frame units (sum of t) in all, nesting at most 64 levels,
// each key once; values in errors are cut at 200 characters.
//
// Usage:
//   auto wl = frameshard::preset_workload("mixed", 7);
//   auto wl2 = frameshard::load_workload("batch.json");
//   auto plan = frameshard::make_plan(wl.grid, opts);
//   auto small = frameshard::scale_workload(wl, 8);  // h, w about 1/8
//   auto g = frameshard::preset_workload("grpo", 0);
//   auto d = frameshard::dedup_frames(
//       g.grid, frameshard::media_id_unit_keys(g.grid, g.media_ids));
//
// Pure functions, thread-safe.
#pragma once

#include <frameshard/dedup.h>
#include <frameshard/frames.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

/// Samples per prompt of the grpo preset.
inline constexpr int64_t kGrpoPresetGroupSize = 8;

struct Workload {
  std::string name;  // preset name or file path
  std::vector<GridThw> grid;
  MediaLayout layout;
  /// One id per grid row (rows with equal ids hold the same media), or
  /// empty: unknown, every row distinct. The grpo preset sets it.
  std::vector<uint64_t> media_ids;
};

std::vector<std::string> workload_preset_names();
/// The prompt that preset_workload("grpo", seed) repeats (its first
/// grid.size() / kGrpoPresetGroupSize rows): mixed's draws with an eighth
/// of its small frames and one huge image, so a group of 8 samples packs
/// about the rows and tokens of one mixed microbatch. The training data's grpo
/// preset draws its prompts here.
Workload grpo_prompt_workload(uint64_t seed);
/// Throws frameshard::Error listing the presets for an unknown name.
Workload preset_workload(const std::string& name, uint64_t seed = 0);
/// Parses JSON text; errors name the field, expected and actual value.
Workload parse_workload(
    const std::string& json, const std::string& source = "");
/// Reads a JSON file (see parse_workload).
Workload load_workload(const std::string& path);
/// JSON text of a workload (round-trips through parse_workload).
std::string to_json(const Workload& workload);

/// One content key per frame unit of `grid` from one id per grid row: each
/// id hashed (SplitMix64) into a UnitKey, then media_unit_keys
/// (frameshard/dedup.h), so rows with one id share every frame's key.
/// frameshard::Error unless ids has one entry per grid row.
std::vector<UnitKey> media_id_unit_keys(
    const std::vector<GridThw>& grid,
    const std::vector<uint64_t>& ids,
    const MediaLayout& layout = {});

/// Scales every frame's h and w down by `scale` (>= 1), keeping them positive
/// multiples of the merge size: h -> merge * ceil(ceil(h / merge) / scale)
/// (for a valid grid, ceil(h / merge) is h / merge). t is unchanged, so the
/// frame units, their order, the media structure and media_ids stay the
/// same; a preset becomes small enough for a CPU. Throws frameshard::Error for
/// scale < 1.
Workload scale_workload(const Workload& workload, int64_t scale);

}  // namespace frameshard
