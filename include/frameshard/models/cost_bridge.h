// File: frameshard/models/cost_bridge.h
//
// From a tower's config to what the planning core needs: the cost model's
// dimensions (frameshard::flop_cost_model) and the media layout (merge and
// temporal patch sizes), so a loaded checkpoint plans with its own sizes.
//
// Usage:
//   frameshard::PlanOptions o;
//   o.layout = frameshard::models::media_layout(model.config);
//   o.cost = frameshard::flop_cost_model(
//       frameshard::models::tower_dims(model.config));
//   o.split.window_side = frameshard::models::split_window_side(model.config);
#pragma once

#include <frameshard/cost.h>
#include <frameshard/frames.h>
#include <frameshard/models/qwen_config.h>

namespace frameshard {
namespace models {

/// Cost-model dimensions of a tower. The preset names ("qwen2-vl",
/// "qwen2.5-vl", "qwen3-vl", "radio", and "qwen3.5" for a qwen3_5*
/// model_type) name
/// the family; the sizes are the config's.
TowerDims tower_dims(const Qwen2VLVisionConfig& config);
TowerDims tower_dims(const Qwen2_5VLVisionConfig& config);
TowerDims tower_dims(const Qwen3VLVisionConfig& config);
/// RADIO: its prefix tokens and the projector's width counted.
TowerDims tower_dims(const RadioVisionConfig& config);
TowerDims tower_dims(const QwenVisionConfig& config);
/// The planner's media layout (merge and temporal patch sizes).
MediaLayout media_layout(const QwenVisionConfig& config);
/// Whether the tower takes pieces of split frames (every family but RADIO,
/// frameshard/models/radio_tower.h): frame_sharding.split_frames needs it.
bool takes_pieces(const QwenVisionConfig& config);
/// SplitOptions::window_side of a tower: window_size / patch_size for
/// Qwen2.5-VL (its window layers then stay local on split frames), 0 for
/// the full-attention families.
int64_t split_window_side(const QwenVisionConfig& config);

}  // namespace models
}  // namespace frameshard
