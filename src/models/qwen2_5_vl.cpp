// Qwen2.5-VL vision tower (HF Qwen2_5_VisionTransformerPretrainedModel):
// Conv3d patch embedding without bias, rows permuted into window order
// (merge units of merge^2 rows), 2-D rotary permuted alike, RMSNorm blocks
// with a SwiGLU MLP ("gate_proj", "up_proj", "down_proj"); window attention
// except in fullatt_block_indexes (per-frame attention there); RMSNorm
// merger ("ln_q", "mlp.0", "mlp.2"), then the window permutation undone.
// Windows never cross frames, so frames stay independent.
#include <frameshard/models/qwen_vision.h>

#include "models/qwen_blocks.h"

#include <algorithm>

namespace frameshard {
namespace models {

int64_t Qwen2_5VLVisionConfig::in_features() const {
  return in_channels * temporal_patch_size * patch_size * patch_size;
}

int64_t Qwen2_5VLVisionConfig::merger_window_size() const {
  return window_size / spatial_merge_size / patch_size;
}

Qwen2_5VLVisionTowerImpl::Qwen2_5VLVisionTowerImpl(
    const Qwen2_5VLVisionConfig& c)
    : config_(c) {
  const char* fn = "Qwen2_5VLVisionTower";
  detail::check_tower_dims(
      fn,
      c.depth,
      c.hidden_size,
      c.num_heads,
      c.intermediate_size,
      c.out_hidden_size,
      c.in_channels,
      c.patch_size,
      c.temporal_patch_size,
      c.spatial_merge_size);
  TORCH_CHECK(
      c.merger_window_size() >= 1,
      "frameshard::",
      fn,
      ": expected window_size >= spatial_merge_size * patch_size (",
      c.spatial_merge_size * c.patch_size,
      "), got ",
      c.window_size);
  for (int64_t i : c.fullatt_block_indexes) {
    TORCH_CHECK(
        i >= 0 && i < c.depth,
        "frameshard::",
        fn,
        ": expected fullatt_block_indexes in [0, ",
        c.depth,
        "), got ",
        i);
  }
  const detail::Activation act = detail::parse_activation(c.hidden_act, fn);
  patch_embed_ = register_module(
      "patch_embed",
      std::make_shared<detail::PatchEmbedImpl>(
          c.in_channels,
          c.temporal_patch_size,
          c.patch_size,
          c.hidden_size,
          /*bias=*/false));
  blocks_ = detail::register_blocks(
      *this,
      c.depth,
      c.hidden_size,
      c.num_heads,
      c.intermediate_size,
      detail::NormKind::kRMSNorm,
      act,
      detail::MlpStyle::kGated);
  merger_ = register_module(
      "merger",
      std::make_shared<detail::PatchMergerImpl>(
          c.hidden_size,
          c.out_hidden_size,
          c.spatial_merge_size,
          detail::NormKind::kRMSNorm,
          detail::MergerStyle::kLnQ,
          /*postshuffle=*/false));
}

std::vector<at::Tensor> Qwen2_5VLVisionTowerImpl::forward(
    const TowerInput& input) {
  const auto& c = config_;
  const int64_t unit = c.spatial_merge_size * c.spatial_merge_size;
  const auto geo = detail::check_tower_input(
      input, c.in_features(), c.spatial_merge_size, "Qwen2_5VLVisionTower");
  const auto win = detail::window_index(
      geo.grid, c.spatial_merge_size, c.merger_window_size());
  at::Tensor x = patch_embed_->forward(input.pixel_values);
  x = detail::permute_units(x, win.index, unit);
  auto rotary = detail::rotary_tables(
      detail::patch_coordinates(geo.grid, c.spatial_merge_size).to(x.device()),
      c.hidden_size / c.num_heads,
      c.rope_theta,
      detail::accum_dtype(x.scalar_type()));
  rotary.cos = detail::permute_units(rotary.cos, win.index, unit);
  rotary.sin = detail::permute_units(rotary.sin, win.index, unit);
  const auto& full = c.fullatt_block_indexes;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    // Full-attention layers use the per-frame segments: the window
    // permutation keeps every frame's rows inside its own segment.
    const bool full_attention =
        std::find(full.begin(), full.end(), static_cast<int64_t>(i)) !=
        full.end();
    x = blocks_[i]->forward(x, rotary, full_attention ? geo.cu : win.cu);
  }
  return {merger_->forward(x).index_select(0, win.inverse.to(x.device()))};
}

VisionTower as_vision_tower(Qwen2_5VLVisionTower tower) {
  std::shared_ptr<Qwen2_5VLVisionTowerImpl> impl = tower.ptr();
  return [impl](const TowerInput& input) { return impl->forward(input); };
}

}  // namespace models
}  // namespace frameshard
