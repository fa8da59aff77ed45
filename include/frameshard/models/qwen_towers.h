// File: frameshard/models/qwen_towers.h
//
// Reference Qwen-VL-family vision towers in LibTorch, numerically matching
// `transformers` (the eager path):
//
//   family      HF class                                  blocks
//   qwen2-vl    Qwen2VisionTransformerPretrainedModel     LayerNorm,
//                                                         quick_gelu MLP
//   qwen2.5-vl  Qwen2_5_VisionTransformerPretrainedModel  RMSNorm, SwiGLU,
//                                                         window attention
//   qwen3-vl    Qwen3VLVisionModel (also Qwen3-VL-MoE,    LayerNorm,
//               Qwen3.5 and Qwen3.5-MoE, whose towers     gelu-tanh MLP,
//               are the same module without DeepStack)    learned positions,
//                                                         DeepStack mergers
//
// Every tower takes packed pixel rows (C * temporal_patch * patch * patch
// features per row, the processor's output) with grid_thw, and:
//   * embeds each row (HF's Conv3d with kernel == stride is a Linear over
//     the flattened row; the weight keeps HF's 5-D shape);
//   * rotates q/k with 2-D rotary ids (h, w) per frame, in the processor's
//     merge-window row order, identical for every temporal index;
//   * attends strictly inside each frame (one cu_seqlens segment per
//     temporal patch; never across frames); Qwen2.5-VL attends inside
//     windows of window_size pixels except in fullatt_block_indexes, after
//     permuting rows into window order (undone after the merger);
//   * Qwen3-VL adds a learned position table bilinearly resampled
//     (align_corners) to each frame's (h, w), and DeepStack mergers applied
//     to the hidden state after each layer of deepstack_visual_indexes;
//   * merges every merge x merge window into one token and projects it to
//     the language model's width (the merger runs before any gather).
// forward returns {embeddings [tokens, out]} plus, for Qwen3-VL, one
// [tokens, out] DeepStack output per deepstack index, in layer order (HF's
// order). Frames are independent: encoding (t, h, w) equals encoding t
// frames (1, h, w), which is what frame sharding relies on.
//
// Numerics follow HF: softmax, rotary and RMSNorm in float32 for float32,
// bfloat16 and float16 towers (then cast back), the interpolation weights
// in float32. A float64 tower runs those steps in float64 instead (HF
// would drop to float32 there); float64 is for exactness tests.
//
// Parameters carry HF's names below the tower ("blocks.0.attn.qkv.weight",
// "merger.mlp.0.weight", "deepstack_merger_list.1.norm.bias", ...), so a
// checkpoint maps by name (frameshard/models/hf_weights.h).
//
// Usage:
//   frameshard::models::Qwen3VLVisionTower tower(cfg);  // random init
//   std::vector<at::Tensor> outs = tower->forward(input);  // TowerInput
//   frameshard::VisionTower fn = frameshard::models::as_vision_tower(tower);
//
// Thread-safety: a tower is a torch::nn::Module (forward is re-entrant;
// parameter updates are not).
#pragma once

#include <frameshard/models/qwen_config.h>
#include <frameshard/tower.h>

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace frameshard {
namespace models {

namespace detail {
class PatchEmbedImpl;
class VisionBlockImpl;
class PatchMergerImpl;
}  // namespace detail

/// Qwen2-VL tower. forward -> {embeddings [tokens, hidden_size]}.
class Qwen2VLVisionTowerImpl : public torch::nn::Module {
 public:
  explicit Qwen2VLVisionTowerImpl(const Qwen2VLVisionConfig& config);
  std::vector<at::Tensor> forward(const TowerInput& input);
  const Qwen2VLVisionConfig& config() const {
    return config_;
  }

 private:
  Qwen2VLVisionConfig config_;
  std::shared_ptr<detail::PatchEmbedImpl> patch_embed_;
  std::vector<std::shared_ptr<detail::VisionBlockImpl>> blocks_;
  std::shared_ptr<detail::PatchMergerImpl> merger_;
};
TORCH_MODULE(Qwen2VLVisionTower);

/// Qwen2.5-VL tower. forward -> {embeddings [tokens, out_hidden_size]}.
class Qwen2_5VLVisionTowerImpl : public torch::nn::Module {
 public:
  explicit Qwen2_5VLVisionTowerImpl(const Qwen2_5VLVisionConfig& config);
  std::vector<at::Tensor> forward(const TowerInput& input);
  const Qwen2_5VLVisionConfig& config() const {
    return config_;
  }

 private:
  Qwen2_5VLVisionConfig config_;
  std::shared_ptr<detail::PatchEmbedImpl> patch_embed_;
  std::vector<std::shared_ptr<detail::VisionBlockImpl>> blocks_;
  std::shared_ptr<detail::PatchMergerImpl> merger_;
};
TORCH_MODULE(Qwen2_5VLVisionTower);

/// Qwen3-VL / Qwen3.5 tower. forward -> {embeddings, deepstack_0, ...},
/// each [tokens, out_hidden_size], DeepStack in layer order.
class Qwen3VLVisionTowerImpl : public torch::nn::Module {
 public:
  explicit Qwen3VLVisionTowerImpl(const Qwen3VLVisionConfig& config);
  std::vector<at::Tensor> forward(const TowerInput& input);
  const Qwen3VLVisionConfig& config() const {
    return config_;
  }

 private:
  Qwen3VLVisionConfig config_;
  std::shared_ptr<detail::PatchEmbedImpl> patch_embed_;
  torch::nn::Embedding pos_embed_{nullptr};
  std::vector<std::shared_ptr<detail::VisionBlockImpl>> blocks_;
  std::shared_ptr<detail::PatchMergerImpl> merger_;
  // deepstack_mergers_[k] serves layer deepstack_visual_indexes[k] (HF's
  // deepstack_merger_list order).
  std::vector<std::shared_ptr<detail::PatchMergerImpl>> deepstack_mergers_;
};
TORCH_MODULE(Qwen3VLVisionTower);

/// The callable frameshard::encode takes.
VisionTower as_vision_tower(Qwen2VLVisionTower tower);
VisionTower as_vision_tower(Qwen2_5VLVisionTower tower);
VisionTower as_vision_tower(Qwen3VLVisionTower tower);

}  // namespace models
}  // namespace frameshard
