// Qwen3-VL vision tower (HF Qwen3VLVisionModel; also Qwen3-VL-MoE and,
// without DeepStack, Qwen3.5): Conv3d patch embedding with bias, a learned
// num_position_embeddings table bilinearly resampled (align_corners) to
// each frame's grid and added, 2-D rotary, LayerNorm blocks with a
// gelu_pytorch_tanh MLP ("linear_fc1", "linear_fc2"), per-frame attention,
// a LayerNorm merger ("norm", "linear_fc1", "linear_fc2") and one DeepStack
// merger per deepstack index whose norm runs after the 2x2 shuffle
// ("deepstack_merger_list.<k>").
#include <frameshard/models/qwen_vision.h>

#include "models/qwen_blocks.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace frameshard {
namespace models {

int64_t Qwen3VLVisionConfig::in_features() const {
  return in_channels * temporal_patch_size * patch_size * patch_size;
}

int64_t Qwen3VLVisionConfig::num_grid_per_side() const {
  // int(n ** 0.5), exactly, for any n.
  int64_t s = static_cast<int64_t>(
      std::sqrt(static_cast<double>(num_position_embeddings)));
  while (s > 0 && s * s > num_position_embeddings) {
    --s;
  }
  while ((s + 1) * (s + 1) <= num_position_embeddings) {
    ++s;
  }
  return s;
}

Qwen3VLVisionTowerImpl::Qwen3VLVisionTowerImpl(const Qwen3VLVisionConfig& c)
    : config_(c) {
  const char* fn = "Qwen3VLVisionTower";
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
      c.num_position_embeddings >= 1,
      "frameshard::",
      fn,
      ": expected num_position_embeddings >= 1, got ",
      c.num_position_embeddings);
  std::set<int64_t> seen;
  for (int64_t i : c.deepstack_visual_indexes) {
    TORCH_CHECK(
        i >= 0 && i < c.depth && seen.insert(i).second,
        "frameshard::",
        fn,
        ": expected distinct deepstack_visual_indexes in [0, ",
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
          /*bias=*/true));
  pos_embed_ = register_module(
      "pos_embed",
      torch::nn::Embedding(c.num_position_embeddings, c.hidden_size));
  blocks_ = detail::register_blocks(
      *this,
      c.depth,
      c.hidden_size,
      c.num_heads,
      c.intermediate_size,
      detail::NormKind::kLayerNorm,
      act,
      detail::MlpStyle::kLinearFc);
  merger_ = register_module(
      "merger",
      std::make_shared<detail::PatchMergerImpl>(
          c.hidden_size,
          c.out_hidden_size,
          c.spatial_merge_size,
          detail::NormKind::kLayerNorm,
          detail::MergerStyle::kLinearFc,
          /*postshuffle=*/false));
  if (!c.deepstack_visual_indexes.empty()) {
    torch::nn::ModuleList list;
    for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
      auto m = std::make_shared<detail::PatchMergerImpl>(
          c.hidden_size,
          c.out_hidden_size,
          c.spatial_merge_size,
          detail::NormKind::kLayerNorm,
          detail::MergerStyle::kLinearFc,
          /*postshuffle=*/true);
      list->push_back(m);
      deepstack_mergers_.push_back(m);
    }
    register_module("deepstack_merger_list", list);
  }
}

std::vector<at::Tensor> Qwen3VLVisionTowerImpl::forward(
    const TowerInput& input) {
  const auto& c = config_;
  const auto geo = detail::check_tower_input(
      input, c.in_features(), c.spatial_merge_size, "Qwen3VLVisionTower");
  at::Tensor x = patch_embed_->forward(input.pixel_values);
  const at::ScalarType acc = detail::accum_dtype(x.scalar_type());
  const at::Tensor coords =
      detail::patch_coordinates(geo.grid, c.spatial_merge_size);
  {
    const auto interp = detail::bilinear_positions(
        geo.grid, coords, c.num_grid_per_side(), acc);
    const at::Device dev = x.device();
    // HF: (pos_embed(indices) * weights[:, :, None]).sum(1), in the
    // promoted dtype, then cast to the hidden dtype.
    at::Tensor pos = (pos_embed_(interp.indices.to(dev)) *
                      interp.weights.to(dev).unsqueeze(-1))
                         .sum(1);
    x = x + pos.to(x.scalar_type());
  }
  const auto rotary = detail::rotary_tables(
      coords.to(x.device()), c.hidden_size / c.num_heads, c.rope_theta, acc);
  std::vector<at::Tensor> deepstack;
  const auto& ds = c.deepstack_visual_indexes;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    x = blocks_[i]->forward(x, rotary, geo.cu);
    auto it = std::find(ds.begin(), ds.end(), static_cast<int64_t>(i));
    if (it != ds.end()) {
      deepstack.push_back(
          deepstack_mergers_[static_cast<size_t>(it - ds.begin())]->forward(x));
    }
  }
  std::vector<at::Tensor> out{merger_->forward(x)};
  out.insert(out.end(), deepstack.begin(), deepstack.end());
  return out;
}

VisionTower as_vision_tower(Qwen3VLVisionTower tower) {
  std::shared_ptr<Qwen3VLVisionTowerImpl> impl = tower.ptr();
  return [impl](const TowerInput& input) { return impl->forward(input); };
}

}  // namespace models
}  // namespace frameshard
