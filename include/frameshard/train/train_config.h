// File: frameshard/train/train_config.h
//
// The recipe of `frameshard train` / `frameshard ab`: the frame-sharding
// schema of frameshard/config.h (section `distributed`, parsed and validated
// by frameshard::parse_config) plus the model, data and training sections:
//
//   distributed: {cp_size: 2, dp_size: 1, multimodal: {...}}  # config.h
//   model:
//     tower: qwen3-vl           # qwen2-vl | qwen2.5-vl | qwen3-vl | radio
//     model_dir: ""             # a Hugging Face checkpoint whose tower
//                               # replaces the random one
//     vision_depth: 2           # random tower only
//     vision_hidden: 64
//     vision_heads: 2
//     deepstack_layers: 1       # qwen3-vl: DeepStack mergers (<= depth)
//     text_hidden: 64           # the decoder's width (= tower output)
//     text_layers: 2
//     text_heads: 4
//     text_ffn: 128
//     vocab_size: 256
//     vision_dp_over_cp: false  # Megatron Bridge's switch (see below)
//     vision_checkpointing: false  # recompute the tower in backward
//   data:
//     preset: mixed             # doc | multi | video | mixed | grpo
//     manifest: ""              # JSONL of samples (data_batch.h); wins
//                               # over preset
//     scale: 6                  # h and w divided by this (>= 1), manifest
//                               # grids too (scale_workload)
//     text_tokens: 16           # text tokens before each medium and at
//                               # the end (synthetic batches; >= 1)
//     samples_per_step: 4       # manifest samples packed per step
//     group_size: 8             # grpo: samples per prompt, G (>= 1)
//     group_order: spread       # grpo: spread | contiguous, how a step's
//                               # dp x G samples go to the DP replicas
//                               # (data_batch.h)
//     seed: 0
//   train:
//     steps: 30
//     lr: 0.001
//     weight_decay: 0.01
//     dtype: float32            # float32 | float64 | bfloat16
//     seed: 0
//     timeout_ms: 120000        # collective timeout
//
// model.vision_dp_over_cp reproduces Megatron Bridge's rule exactly: when
// true it overrides the frame-sharding section with a count split
// (remainder on the last rank), placeholder frames for ranks without one, no
// size thresholds, on at every cp_size > 1 and a silent no-op at 1.
//
// The cost model counts the FLOPs of frame_sharding.tower (cost_alpha
// "auto"); when a recipe does not set that key it follows model.tower, and
// an override of model.tower carries a following one along. Cross-field
// rules: vision_hidden / vision_heads a multiple of 4 (2-D rotary),
// text_hidden / text_heads even, deepstack_layers <= vision_depth (qwen3-vl;
// other towers ignore it), vocab_size >= 3 (ids 0 and 1 are padding and
// media). With model_dir set, the vision_* sizes are the checkpoint's and the
// decoder takes the tower's output width instead of text_hidden.
//
// Every error names the full key path, what was expected and what was given
// (and "in FILE:LINE" for files), as frameshard/config.h does; unknown keys
// are rejected.
//
// Usage:
//   auto cfg = frameshard::train::load_train_config("recipe.yaml");
//   frameshard::train::apply_train_override(cfg, "train.steps", "6");
//   auto d = frameshard::train::default_train_config();  // embedded default
#pragma once

#include <frameshard/config.h>

#include <cstdint>
#include <string>

namespace frameshard {
namespace train {

struct ModelConfig {
  std::string tower = "qwen3-vl";
  std::string model_dir;
  int64_t vision_depth = 2;
  int64_t vision_hidden = 64;
  int64_t vision_heads = 2;
  int64_t deepstack_layers = 1;
  int64_t text_hidden = 64;
  int64_t text_layers = 2;
  int64_t text_heads = 4;
  int64_t text_ffn = 128;
  int64_t vocab_size = 256;
  bool vision_dp_over_cp = false;
  bool vision_checkpointing = false;
};

struct DataConfig {
  std::string preset = "mixed";
  std::string manifest;
  int64_t scale = 6;
  int64_t text_tokens = 16;
  int64_t samples_per_step = 4;
  int64_t group_size = 8;
  std::string group_order = "spread";
  int64_t seed = 0;
};

struct OptimConfig {
  int64_t steps = 30;
  double lr = 1e-3;
  double weight_decay = 0.01;
  std::string dtype = "float32";
  int64_t seed = 0;
  int64_t timeout_ms = 120000;
};

struct TrainConfig {
  Config parallel;  // section `distributed` (frameshard/config.h)
  ModelConfig model;
  DataConfig data;
  OptimConfig train;
};

/// Parses YAML text; `source` names it in errors. Missing keys keep their
/// defaults (the struct initialisers above).
TrainConfig parse_train_config(
    const std::string& yaml, const std::string& source = "");
/// Reads and parses a YAML file; a missing or unreadable file is an error.
/// A relative data.manifest or model.model_dir is relative to the file's
/// directory (returned joined to it), so a recipe runs from anywhere.
TrainConfig load_train_config(const std::string& path);
/// One dotted override ("train.steps", "6"); `distributed.*` keys go to
/// frameshard::apply_override. A section name alone takes a YAML mapping
/// ("model", "{text_layers: 3}"). Validated like the file; on an error the
/// config is unchanged.
void apply_train_override(
    TrainConfig& config,
    const std::string& dotted_key,
    const std::string& value);
/// Cross-field checks (e.g. text_hidden divisible by text_heads,
/// deepstack_layers <= vision_depth); the parsers call it.
void validate(const TrainConfig& config);
/// YAML text that round-trips through parse_train_config.
std::string to_yaml(const TrainConfig& config);
/// The embedded default recipe: CP=2 on CPU with Gloo, a model small enough
/// that `frameshard ab` finishes in a few minutes on 2 cores.
TrainConfig default_train_config();
/// Its YAML text (what `frameshard train --print-config` shows).
const char* default_train_config_yaml();

/// The plan options of one arm: frame sharding from the config when
/// `sharded`, else forced off. With model.vision_dp_over_cp the sharded arm
/// is Megatron Bridge's rule (count split, no thresholds, no floor rows,
/// off at cp_size 1).
PlanOptions arm_plan_options(const TrainConfig& config, bool sharded);
/// The same for the tower that runs: cost_alpha auto counts `running`
/// (frameshard::plan_options(config, running)).
PlanOptions arm_plan_options(
    const TrainConfig& config, bool sharded, const TowerDims& running);

}  // namespace train
}  // namespace frameshard
