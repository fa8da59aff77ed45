// File: frameshard/models/toy_tower.h
//
// A small random Qwen-style vision tower for parity checks (frameshard
// verify, the multi-rank tests, the examples). It has the properties that
// matter for frame sharding, at a size that runs in milliseconds:
//   * patch embedding of packed pixel rows (Linear in_features -> hidden);
//   * a spatial-only 2-D position signal per frame computed from grid_thw
//     (same for every temporal index, like Qwen's rotary ids), in the
//     processor's 2x2 merge-window row order;
//   * `depth` pre-norm transformer blocks whose attention stays strictly
//     inside each frame (segments from cu_seqlens; no cross-frame attention);
//   * a 2x2 patch merger (LayerNorm, 4 rows -> 1, MLP to out_hidden);
//   * a DeepStack-like extra output: the hidden state after block
//     `deepstack_layer`, merged by its own merger.
// forward returns {embeddings [tokens, out_hidden],
//                  deepstack [tokens, out_hidden]} (the second only when
// options.deepstack).
//
// Usage:
//   torch::manual_seed(0);
//   frameshard::models::ToyTower tower(frameshard::models::ToyTowerOptions{});
//   auto outs = tower->forward(input);  // input: frameshard::TowerInput
//   frameshard::VisionTower fn = frameshard::models::as_vision_tower(tower);
#pragma once

#include <frameshard/tower.h>

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace models {

struct ToyTowerOptions {
  int64_t channels = 3;
  int64_t patch_size = 4;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t hidden = 32;
  int64_t heads = 2;
  int64_t depth = 2;
  int64_t out_hidden = 48;
  bool deepstack = true;
  int64_t deepstack_layer = 0;
  /// channels * temporal_patch_size * patch_size^2
  int64_t in_features() const {
    return channels * temporal_patch_size * patch_size * patch_size;
  }
};

class ToyTowerImpl : public torch::nn::Module {
 public:
  explicit ToyTowerImpl(const ToyTowerOptions& options);
  std::vector<at::Tensor> forward(const TowerInput& input);
  const ToyTowerOptions& options() const {
    return options_;
  }

 private:
  ToyTowerOptions options_;
  torch::nn::Linear embed_{nullptr};
  struct Block {
    torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
    torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
  };
  std::vector<Block> blocks_;
  struct Merger {
    torch::nn::LayerNorm norm{nullptr};
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  };
  Merger merger_, deepstack_merger_;
  at::Tensor block_forward(
      const Block& b, const at::Tensor& x, const at::Tensor& cu_seqlens);
  at::Tensor merge(const Merger& m, const at::Tensor& x);
};
TORCH_MODULE(ToyTower);

/// Wraps a tower module as the callable frameshard::encode takes.
VisionTower as_vision_tower(ToyTower tower);

}  // namespace models
}  // namespace frameshard
