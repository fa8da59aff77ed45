// Qwen2-VL vision tower (HF Qwen2VisionTransformerPretrainedModel): Conv3d
// patch embedding without bias, 2-D rotary, LayerNorm blocks with a
// quick_gelu MLP ("fc1", "fc2"), per-frame attention, LayerNorm merger
// ("ln_q", "mlp.0", "mlp.2") to hidden_size.
#include <frameshard/models/qwen_vision.h>

#include "models/qwen_blocks.h"

namespace frameshard {
namespace models {

int64_t Qwen2VLVisionConfig::intermediate_size() const {
  // HF: int(embed_dim * mlp_ratio).
  return static_cast<int64_t>(static_cast<double>(embed_dim) * mlp_ratio);
}

int64_t Qwen2VLVisionConfig::in_features() const {
  return in_channels * temporal_patch_size * patch_size * patch_size;
}

Qwen2VLVisionTowerImpl::Qwen2VLVisionTowerImpl(const Qwen2VLVisionConfig& c)
    : config_(c) {
  const char* fn = "Qwen2VLVisionTower";
  detail::check_tower_dims(
      fn,
      c.depth,
      c.embed_dim,
      c.num_heads,
      c.intermediate_size(),
      c.hidden_size,
      c.in_channels,
      c.patch_size,
      c.temporal_patch_size,
      c.spatial_merge_size);
  const detail::Activation act = detail::parse_activation(c.hidden_act, fn);
  patch_embed_ = register_module(
      "patch_embed",
      std::make_shared<detail::PatchEmbedImpl>(
          c.in_channels,
          c.temporal_patch_size,
          c.patch_size,
          c.embed_dim,
          /*bias=*/false));
  blocks_ = detail::register_blocks(
      *this,
      c.depth,
      c.embed_dim,
      c.num_heads,
      c.intermediate_size(),
      detail::NormKind::kLayerNorm,
      act,
      detail::MlpStyle::kFc);
  merger_ = register_module(
      "merger",
      std::make_shared<detail::PatchMergerImpl>(
          c.embed_dim,
          c.hidden_size,
          c.spatial_merge_size,
          detail::NormKind::kLayerNorm,
          detail::MergerStyle::kLnQ,
          /*postshuffle=*/false));
}

std::vector<at::Tensor> Qwen2VLVisionTowerImpl::forward(
    const TowerInput& input) {
  const auto& c = config_;
  const auto geo = detail::check_tower_input(
      input, c.in_features(), c.spatial_merge_size, "Qwen2VLVisionTower");
  at::Tensor x = patch_embed_->forward(input.pixel_values);
  const auto rotary = detail::rotary_tables(
      detail::patch_coordinates(geo.grid, c.spatial_merge_size).to(x.device()),
      c.embed_dim / c.num_heads,
      c.rope_theta,
      detail::accum_dtype(x.scalar_type()));
  for (const auto& block : blocks_) {
    x = block->forward(x, rotary, geo.cu);
  }
  return {merger_->forward(x)};
}

VisionTower as_vision_tower(Qwen2VLVisionTower tower) {
  std::shared_ptr<Qwen2VLVisionTowerImpl> impl = tower.ptr();
  return [impl](const TowerInput& input) { return impl->forward(input); };
}

}  // namespace models
}  // namespace frameshard
