// Qwen3-VL vision tower (HF Qwen3VLVisionModel; also Qwen3-VL-MoE and,
// without DeepStack, Qwen3.5): Conv3d patch embedding with bias, a learned
// num_position_embeddings table bilinearly resampled (align_corners) to
// each frame's grid and added, 2-D rotary, LayerNorm blocks with a
// gelu_pytorch_tanh MLP ("linear_fc1", "linear_fc2"), per-frame attention,
// a LayerNorm merger ("norm", "linear_fc1", "linear_fc2") and one DeepStack
// merger per deepstack index whose norm runs after the 2x2 shuffle
// ("deepstack_merger_list.<k>"). Split frames: positions from the whole
// frame, every layer exchanges keys and values.
#include <frameshard/models/qwen_towers.h>

#include "models/qwen_blocks.h"
#include "tower/check.h"

#include <set>

namespace frameshard {
namespace models {

namespace {

detail::TowerSpec spec_of(const Qwen3VLVisionConfig& c) {
  detail::TowerSpec s = detail::common_spec(c, "Qwen3VLVisionTower");
  s.dim = c.hidden_size;
  s.mlp_hidden = c.intermediate_size;
  s.out = c.out_hidden_size;
  s.patch_bias = true;
  s.norm = detail::NormKind::kLayerNorm;
  s.mlp = detail::MlpStyle::kLinearFc;
  s.merger = detail::MergerStyle::kLinearFc;
  return s;
}

}  // namespace

Qwen3VLVisionTowerImpl::Qwen3VLVisionTowerImpl(const Qwen3VLVisionConfig& c)
    : config_(c) {
  const detail::TowerSpec s = spec_of(c);
  detail::check_tower_spec(s);
  FRAMESHARD_TORCH_CHECK(
      c.num_position_embeddings >= 1,
      s.name,
      "expected num_position_embeddings >= 1, got ",
      c.num_position_embeddings);
  std::set<int64_t> seen;
  for (int64_t i : c.deepstack_visual_indexes) {
    FRAMESHARD_TORCH_CHECK(
        i >= 0 && i < c.depth && seen.insert(i).second,
        s.name,
        "expected distinct deepstack_visual_indexes in [0, ",
        c.depth,
        "), got ",
        i);
  }
  patch_embed_ = detail::register_patch_embed(*this, s);
  pos_embed_ = register_module(
      "pos_embed",
      torch::nn::Embedding(c.num_position_embeddings, c.hidden_size));
  blocks_ = detail::register_blocks(*this, s);
  merger_ = register_module("merger", detail::make_merger(s, false));
  if (!c.deepstack_visual_indexes.empty()) {
    torch::nn::ModuleList list;
    for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
      deepstack_mergers_.push_back(
          detail::make_merger(s, /*postshuffle=*/true));
      list->push_back(deepstack_mergers_.back());
    }
    register_module("deepstack_merger_list", list);
  }
}

std::vector<at::Tensor> Qwen3VLVisionTowerImpl::forward(
    const TowerInput& input) {
  const detail::TowerSpec s = spec_of(config_);
  const auto geo =
      detail::check_tower_input(input, config_.in_features(), s.merge, s.name);
  at::Tensor x = patch_embed_->forward(input.pixel_values);
  // Positions of the whole frames, then the local rows (split frames).
  const at::Tensor coords = detail::patch_coordinates(geo.grid, s.merge);
  {
    const auto interp = detail::bilinear_positions(
        geo.grid,
        coords,
        config_.num_grid_per_side(),
        detail::accum_dtype(x.scalar_type()));
    const at::Device dev = x.device();
    // HF: (pos_embed(indices) * weights[:, :, None]).sum(1), in the
    // promoted dtype, then cast to the hidden dtype.
    at::Tensor pos = (pos_embed_(geo.local(interp.indices).to(dev)) *
                      geo.local(interp.weights).to(dev).unsqueeze(-1))
                         .sum(1);
    x = x + pos.to(x.scalar_type());
  }
  const auto rotary = detail::tower_rotary(s, geo.local(coords), x);
  const auto split = detail::split_attention(input, geo);
  std::vector<at::Tensor> out{at::Tensor()};  // the merger's, filled last
  for (size_t i = 0; i < blocks_.size(); ++i) {
    x = blocks_[i]->forward(x, rotary, geo.cu, split);
    const int64_t k = detail::layer_slot(config_.deepstack_visual_indexes, i);
    if (k >= 0) {
      out.push_back(deepstack_mergers_[static_cast<size_t>(k)]->forward(x));
    }
  }
  out[0] = merger_->forward(x);
  return out;
}

VisionTower as_vision_tower(Qwen3VLVisionTower tower) {
  return detail::tower_function(tower.ptr());
}

}  // namespace models
}  // namespace frameshard
