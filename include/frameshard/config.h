// File: frameshard/config.h
//
// The YAML configuration, in the schema of NeMo Automodel's frame sharding
// plus our own keys (marked *):
//
//   distributed:
//     cp_size: 2            # at most kMaxWorld (65536)
//     dp_size: 1            # * used by mesh helpers
//     tp_size: 1            # *
//     multimodal:
//       vision:
//         frame_sharding:
//           enabled: true
//           mesh_dims: [cp]     # or [dp, cp]: balance the vision work
//                               # of every DP replica over the whole
//                               # dp x cp mesh (frameshard/mesh_plan.h,
//                               # runtime/mesh_encode.h)
//           min_tokens: 2048
//           min_frames: 32
//           min_local_patch_rows: 96  # at most 2^20
//           cost_alpha: auto    # or n >= 0, a tower preset, "automodel",
//                               # "automodel:<preset>", "quadratic:a,b,c",
//                               # "online" (frameshard/online_cost.h)
//           partitioner: optimal  # * optimal | greedy | count | lpt
//           gather: all           # * all: every rank gets every visual
//                                 # row; owner: each row goes only to the
//                                 # rank owning its sequence position
//                                 # (frameshard/owner_route.h)
//           split_frames: false   # * true: the optimal partitioner may cut
//                                 # a frame into pieces of its patch rows
//                                 # across ranks (frameshard/split_plan.h);
//                                 # needs partitioner optimal
//           split_exchange_cost: 1000  # * FLOP-model units per K/V row a
//                                 # piece receives (SplitOptions::
//                                 # exchange_row_cost, converted to
//                                 # seconds for a calibrated cost_alpha),
//                                 # 0 to 2^40
//           split_min_gain: 0.05  # * cut only when the modelled bottleneck
//                                 # drops by at least this fraction, [0, 1)
//                                 # (SplitOptions::min_gain)
//           split_exchange_latency_us: 50  # * fixed latency of one K/V
//                                 # exchange (one full-attention layer,
//                                 # forward + backward), microseconds, >= 0;
//                                 # a split plan pays it on every rank per
//                                 # full-attention layer (SplitOptions::
//                                 # exchange_fixed_cost); measure it with
//                                 # frameshard.calibrate_exchange
//           tower: qwen3-vl       # * tower whose FLOPs "auto" counts
//           policy: threshold     # * threshold: min_tokens/min_frames;
//                                 # auto: shard when the predicted vision
//                                 # saving exceeds the gather time
//                                 # (frameshard/policy.h)
//           gather_bandwidth_gbps: 25  # * auto: GB/s into a rank (> 0)
//           dedup: false          # * true: encode each distinct frame once
//                                 # in the group (the mesh with [dp, cp]),
//                                 # keyed by a hash of its pixel rows, and
//                                 # copy its rows to every use
//                                 # (frameshard/dedup.h)
//           mesh_min_gain: 0.05   # * [dp, cp] with policy auto: pool the
//                                 # replicas' frames over the mesh only when
//                                 # that saves this share of the CP-only
//                                 # plan's predicted vision time, [0, 1)
//                                 # (frameshard/mesh_plan.h)
//
// cost_alpha may also be the path of a `frameshard calibrate` file
// (relative to the working directory; frameshard/calibrate.h), whose
// coefficients are seconds: the auto policy then weighs measured time.
// Every error names the full key path, what was expected and what was given:
//   frameshard::config:
//   distributed.multimodal.vision.frame_sharding.min_tokens: expected a
//   non-negative integer, got true
// Unknown keys, booleans where integers belong, negatives, mesh_dims other
// than [cp] and [dp, cp], the flat legacy key
// distributed.cp_vision_frame_sharding, YAML anchors and aliases (a
// self-reference would recurse, nested aliases expand exponentially), a second
// YAML document and a path that is not a regular file are rejected. Values in
// errors are cut at 200 characters.
//
// Usage:
//   auto cfg = frameshard::load_config("train.yaml");
//   frameshard::apply_override(
//       cfg, "distributed.multimodal.vision.frame_sharding.enabled", "false");
//   frameshard::PlanOptions o = frameshard::plan_options(cfg);
#pragma once

#include <frameshard/mesh_plan.h>
#include <frameshard/plan.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

/// Prefix of every frame-sharding key.
inline constexpr const char* kFrameShardingPath =
    "distributed.multimodal.vision.frame_sharding";

/// Default frame_sharding.split_exchange_latency_us: one small all-to-all
/// forward and one backward inside an NVLink node (about 25 us each with
/// NCCL): a documented guess; frameshard.calibrate_exchange measures it.
constexpr double kDefaultSplitExchangeLatencyUs = 50.0;

struct FrameShardingConfig {
  bool enabled = false;
  std::vector<std::string> mesh_dims{"cp"};
  int64_t min_tokens = 2048;
  int64_t min_frames = 32;
  int64_t min_local_patch_rows = 96;
  std::string cost_alpha = "auto";
  std::string partitioner = "optimal";
  std::string gather = "all";
  bool split_frames = false;
  int64_t split_exchange_cost = 1000;
  double split_min_gain = 0.05;
  double split_exchange_latency_us = kDefaultSplitExchangeLatencyUs;
  std::string tower = "qwen3-vl";
  std::string policy = "threshold";
  double gather_bandwidth_gbps = kDefaultGatherBandwidthGbps;
  bool dedup = false;
  double mesh_min_gain = kDefaultMeshMinGain;
};

/// Largest frame_sharding.split_exchange_cost.
constexpr int64_t kMaxSplitExchangeCost = int64_t{1} << 40;

struct Config {
  int64_t cp_size = 1;
  int64_t dp_size = 1;
  int64_t tp_size = 1;
  FrameShardingConfig frame_sharding;
};

/// Parses YAML text; `source` names it in errors (a file name).
Config parse_config(const std::string& yaml, const std::string& source = "");
/// Parses the `distributed` section of a document that has other top-level
/// sections too (a training recipe's model, data, train): the keys in
/// `other_sections` are skipped here, for their owner to parse, and listed
/// among the known keys when an unknown top-level key is rejected. Errors
/// are worded exactly as parse_config's.
Config parse_config(
    const std::string& yaml,
    const std::string& source,
    const std::vector<std::string>& other_sections);
/// Reads and parses a YAML file; a missing or unreadable file is an error.
Config load_config(const std::string& path);
/// Applies one dotted override, e.g.
/// ("distributed.multimodal.vision.frame_sharding.enabled", "false"). The
/// value is parsed as YAML ("[cp]", "96", "auto") and validated like the file.
void apply_override(
    Config& config, const std::string& dotted_key, const std::string& value);
/// Validates cross-field rules (cp_size >= 1, known partitioner, parseable
/// cost_alpha, known tower, split_frames only with partitioner optimal);
/// parse_config and apply_override call it.
void validate(const Config& config);
/// The keys directly under kFrameShardingPath that the schema knows, in
/// declaration order ("enabled", "mesh_dims", ...): the one list the Python
/// layer's FrameShardingConfig fields are checked against.
std::vector<std::string> frame_sharding_keys();
/// Renders the config back to YAML (round-trips through parse_config).
std::string to_yaml(const Config& config);

/// The plan options the config describes (world = cp_size; split.enabled =
/// split_frames, split.window_side = the tower's window side in patches,
/// 8 for qwen2.5-vl, else 0).
PlanOptions plan_options(const Config& config);
/// The same for a caller that knows the tower it runs (train/ab, encode,
/// the Python package given a module): cost_alpha "auto" and "automodel"
/// count `running` (not the `tower` preset, which only names the tower
/// when none is known) and split.window_side is `running`'s window side.
PlanOptions plan_options(const Config& config, const TowerDims& running);

}  // namespace frameshard
