// File: frameshard/models/hf_config.h
//
// Hugging Face config.json <-> QwenVisionConfig. One field table per family
// drives both directions, so whatever the writer writes the parser reads
// back equal. The model_type selects the family: qwen2_vl; qwen2_5_vl;
// qwen3_vl and qwen3_vl_moe; qwen3_5 and qwen3_5_moe (the Qwen3-VL tower
// without DeepStack); nemotron_h_omni (RADIO with Nemotron Omni's pixel
// shuffle and projector: vision_config plus projector_hidden_size,
// downsample_ratio and text_config's hidden_size and
// num_nextn_predict_layers). The vision fields live under "vision_config" (a
// bare Qwen vision config, model_type "<family>_vision", has them at the top
// level).
//
// Limits, checked before anything is sized by them: vision `depth` <= 256
// (kMaxVisionDepth; released towers have 24 to 32 blocks); every other
// integer field (widths, heads, window_size, patch sizes...), mlp_ratio and
// the patch features in_channels * temporal_patch_size * patch_size^2 <=
// kMaxVisionInteger (65536); the JSON nests <= 64 levels, each key once.
//
// Usage:
//   auto cfg = frameshard::models::load_qwen_vision_config("/ckpt/Qwen3-VL");
//   cfg.as<frameshard::models::Qwen3VLVisionConfig>().depth = 2;
//   frameshard::models::save_qwen_vision_config("/tmp/tiny", cfg);
#pragma once

#include <frameshard/models/qwen_config.h>

#include <cstdint>
#include <string>

namespace frameshard {
namespace models {

/// Largest vision_config.depth read or written.
constexpr int64_t kMaxVisionDepth = 256;
/// Largest value of any other integer (or mlp_ratio) field.
constexpr int64_t kMaxVisionInteger = 65536;

/// Parses a config.json text. Missing or null fields take HF's defaults;
/// other keys are ignored; wrongly typed or invalid fields raise naming
/// `source` and the field (e.g. "vision_config.depth").
QwenVisionConfig parse_qwen_vision_config(
    const std::string& json_text, const std::string& source = "config.json");
/// Reads `path`: a config.json file or a directory holding one.
QwenVisionConfig load_qwen_vision_config(const std::string& path);

/// The config.json text of `config` (2-space indented JSON): model_type and
/// the vision fields of its family table under "vision_config" (at the top
/// level for a bare "<family>_vision" model_type), rope_theta as
/// rope_parameters {rope_theta, rope_type "axial"}. Only what frameshard
/// reads: a full HF model config also has a text_config. Raises for a
/// model_type of another family and for values the parser would refuse.
std::string qwen_vision_config_json(const QwenVisionConfig& config);
/// Writes qwen_vision_config_json(config) to `path`, or to
/// `path`/config.json when `path` is a directory. Overwrites.
void save_qwen_vision_config(
    const std::string& path, const QwenVisionConfig& config);

}  // namespace models
}  // namespace frameshard
