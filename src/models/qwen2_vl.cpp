// Qwen2-VL vision tower (HF Qwen2VisionTransformerPretrainedModel): Conv3d
// patch embedding without bias, 2-D rotary, LayerNorm blocks with a
// quick_gelu MLP ("fc1", "fc2"), per-frame attention, LayerNorm merger
// ("ln_q", "mlp.0", "mlp.2") to hidden_size. Split frames: positions from
// the whole frame, every layer exchanges keys and values.
#include <frameshard/models/qwen_towers.h>

#include "models/qwen_blocks.h"

namespace frameshard {
namespace models {

namespace {

detail::TowerSpec spec_of(const Qwen2VLVisionConfig& c) {
  detail::TowerSpec s = detail::common_spec(c, "Qwen2VLVisionTower");
  s.dim = c.embed_dim;
  s.mlp_hidden = c.intermediate_size();
  s.out = c.hidden_size;
  s.patch_bias = false;
  s.norm = detail::NormKind::kLayerNorm;
  s.mlp = detail::MlpStyle::kFc;
  s.merger = detail::MergerStyle::kLnQ;
  return s;
}

}  // namespace

Qwen2VLVisionTowerImpl::Qwen2VLVisionTowerImpl(const Qwen2VLVisionConfig& c)
    : config_(c) {
  const detail::TowerSpec s = spec_of(c);
  detail::check_tower_spec(s);
  patch_embed_ = detail::register_patch_embed(*this, s);
  blocks_ = detail::register_blocks(*this, s);
  merger_ = register_module("merger", detail::make_merger(s, false));
}

std::vector<at::Tensor> Qwen2VLVisionTowerImpl::forward(
    const TowerInput& input) {
  const detail::TowerSpec s = spec_of(config_);
  const auto geo =
      detail::check_tower_input(input, config_.in_features(), s.merge, s.name);
  at::Tensor x = patch_embed_->forward(input.pixel_values);
  const auto rotary = detail::tower_rotary(
      s, geo.local(detail::patch_coordinates(geo.grid, s.merge)), x);
  const auto split = detail::split_attention(input, geo);
  for (const auto& block : blocks_) {
    x = block->forward(x, rotary, geo.cu, split);
  }
  return {merger_->forward(x)};
}

VisionTower as_vision_tower(Qwen2VLVisionTower tower) {
  return detail::tower_function(tower.ptr());
}

}  // namespace models
}  // namespace frameshard
