// File: frameshard/models/radio_tower.h
//
// Nemotron Omni's vision chain in LibTorch, numerically matching
// transformers' NemotronH_Omni_Reasoning_V3.get_image_features (eager path,
// transformers 5.24 checked): the RADIO encoder (RadioModel, its input
// conditioner external as in the Omni model), the optional final LayerNorm,
// the 2 x 2 pixel shuffle and the projector, in that order, so that the
// projector runs before any gather ("project, then gather", as Megatron
// Bridge orders it).
//
//   * each pixel row (one RADIO patch, C * patch^2 features, channel-major)
//     is projected without bias; every frame's patches are row-major, as
//     transformers' processor packs them;
//   * the position table (max_img_size / patch)^2 is bilinearly resampled
//     (align_corners false) to a square of the frame's longer side and
//     cropped to (h, w) (RADIO's CPE), and added;
//   * num_cls_tokens + num_registers learned prefix tokens go before each
//     frame's patches; every block (LayerNorm, attention with fused qkv,
//     layer scale, GELU MLP, layer scale) attends inside each frame's
//     prefix-plus-patches sequence only;
//   * the prefix is dropped, each frame's (h, w) features are pixel-shuffled
//     to (h/2, w/2) tokens of 4 * hidden (2 x 2 blocks in row-major order,
//     transformers' pixel_shuffle) and projected: RMSNorm (scaled in
//     float32, eps 1e-5), Linear, relu^2, Linear to text_config.hidden_size.
// forward returns {embeddings [tokens, out_hidden_size]}, h * w / 4 tokens
// per frame. A grid row (t, h, w) is t images of h x w (frames are
// independent); h and w must be even, as transformers' pixel shuffle needs.
//
// Split frames are not taken: a piece would need its frame's prefix tokens
// and a 2 x 2-aligned cut of the row-major patches; TowerInput::pieces
// raises. Numerics: softmax and the position resampling in float32 (float64
// for a float64 tower, as the Qwen towers).
//
// Parameters carry the names of the checkpoints transformers writes and
// NVIDIA ships (transformers renames them on load):
// "vision_model.radio_model.model.blocks.0.attn.qkv.weight",
// "vision_model.radio_model.model.patch_generator.pos_embed",
// "vision_projector.vision_final_layernorm.weight", "mlp1.1.weight", ...
// (frameshard/models/hf_weights.h loads them beside the language model's).
//
// Usage:
//   frameshard::models::RadioVisionTower tower(cfg);  // random init
//   std::vector<at::Tensor> outs = tower->forward(input);  // TowerInput
//   frameshard::VisionTower fn = frameshard::models::as_vision_tower(tower);
#pragma once

#include <frameshard/models/qwen_config.h>
#include <frameshard/tower.h>

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace frameshard {
namespace models {

namespace detail {
class NormImpl;
class VisionBlockImpl;
}  // namespace detail

/// RADIO + pixel shuffle + projector. forward -> {embeddings}.
class RadioVisionTowerImpl : public torch::nn::Module {
 public:
  explicit RadioVisionTowerImpl(const RadioVisionConfig& config);
  std::vector<at::Tensor> forward(const TowerInput& input);
  const RadioVisionConfig& config() const {
    return config_;
  }

 private:
  /// [h * w, hidden]: the position table resampled to one frame.
  at::Tensor frame_positions(int64_t h, int64_t w, at::ScalarType dtype) const;

  RadioVisionConfig config_;
  at::Tensor embedder_, pos_embed_, prefix_;
  std::vector<std::shared_ptr<detail::VisionBlockImpl>> blocks_;
  std::shared_ptr<detail::NormImpl> final_norm_;  // null without MTP layers
  std::shared_ptr<detail::NormImpl> projector_norm_;
  torch::nn::Linear projector1_{nullptr}, projector2_{nullptr};
};
TORCH_MODULE(RadioVisionTower);

/// The callable frameshard::encode takes.
VisionTower as_vision_tower(RadioVisionTower tower);

/// Checkpoint tensors under the tower's roots that are not parameters of
/// the tower: RADIO's summary_idxs buffer and the video patch projection
/// (tubelets are not encoded here).
std::vector<std::string> radio_unused_tensors();

}  // namespace models
}  // namespace frameshard
