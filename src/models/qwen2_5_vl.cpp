// Qwen2.5-VL vision tower (HF Qwen2_5_VisionTransformerPretrainedModel):
// Conv3d patch embedding without bias, rows permuted into window order
// (merge units of merge^2 rows), 2-D rotary permuted alike, RMSNorm blocks
// with a SwiGLU MLP ("gate_proj", "up_proj", "down_proj"); window attention
// except in fullatt_block_indexes (per-frame attention there); RMSNorm
// merger ("ln_q", "mlp.0", "mlp.2"), then the window permutation undone.
// Windows never cross frames, so frames stay independent. A split frame's
// piece holds whole window rows: its windows are its own.
#include <frameshard/models/qwen_towers.h>

#include "models/qwen_blocks.h"
#include "tower/check.h"

namespace frameshard {
namespace models {

namespace {

detail::TowerSpec spec_of(const Qwen2_5VLVisionConfig& c) {
  detail::TowerSpec s = detail::common_spec(c, "Qwen2_5VLVisionTower");
  s.dim = c.hidden_size;
  s.mlp_hidden = c.intermediate_size;
  s.out = c.out_hidden_size;
  s.patch_bias = false;
  s.norm = detail::NormKind::kRMSNorm;
  s.mlp = detail::MlpStyle::kGated;
  s.merger = detail::MergerStyle::kLnQ;
  return s;
}

}  // namespace

Qwen2_5VLVisionTowerImpl::Qwen2_5VLVisionTowerImpl(
    const Qwen2_5VLVisionConfig& c)
    : config_(c) {
  const detail::TowerSpec s = spec_of(c);
  detail::check_tower_spec(s);
  FRAMESHARD_TORCH_CHECK(
      c.merger_window_size() >= 1,
      s.name,
      "expected window_size >= spatial_merge_size * patch_size (",
      c.spatial_merge_size * c.patch_size,
      "), got ",
      c.window_size);
  for (int64_t i : c.fullatt_block_indexes) {
    FRAMESHARD_TORCH_CHECK(
        i >= 0 && i < c.depth,
        s.name,
        "expected fullatt_block_indexes in [0, ",
        c.depth,
        "), got ",
        i);
  }
  patch_embed_ = detail::register_patch_embed(*this, s);
  blocks_ = detail::register_blocks(*this, s);
  merger_ = register_module("merger", detail::make_merger(s, false));
}

std::vector<at::Tensor> Qwen2_5VLVisionTowerImpl::forward(
    const TowerInput& input) {
  const detail::TowerSpec s = spec_of(config_);
  const int64_t unit = s.merge * s.merge;
  const auto geo =
      detail::check_tower_input(input, config_.in_features(), s.merge, s.name);
  const auto win =
      detail::window_index(geo, s.merge, config_.merger_window_size(), s.name);
  at::Tensor x = patch_embed_->forward(input.pixel_values);
  x = detail::permute_units(x, win.index, unit);
  auto rotary = detail::tower_rotary(
      s, geo.local(detail::patch_coordinates(geo.grid, s.merge)), x);
  rotary.cos = detail::permute_units(rotary.cos, win.index, unit);
  rotary.sin = detail::permute_units(rotary.sin, win.index, unit);
  const auto split = detail::split_attention(input, geo);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    // Full-attention layers use the per-frame segments: the window
    // permutation keeps every frame's rows inside its own segment.
    const bool full_attention =
        detail::layer_slot(config_.fullatt_block_indexes, i) >= 0;
    // Split frames exchange keys and values in these layers only: pieces
    // hold whole window rows, so window layers stay local.
    x = full_attention ? blocks_[i]->forward(x, rotary, geo.cu, split)
                       : blocks_[i]->forward(x, rotary, win.cu);
  }
  return {merger_->forward(x).index_select(0, win.inverse.to(x.device()))};
}

VisionTower as_vision_tower(Qwen2_5VLVisionTower tower) {
  return detail::tower_function(tower.ptr());
}

}  // namespace models
}  // namespace frameshard
