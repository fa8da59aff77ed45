// File: frameshard/models/qwen_vision.h
//
// Reference Qwen-VL-family vision towers in LibTorch, loadable from Hugging
// Face checkpoints, numerically matching `transformers` (the eager path):
//
//   family       HF class                                  blocks
//   qwen2-vl     Qwen2VisionTransformerPretrainedModel     LayerNorm,
//   quick_gelu MLP qwen2.5-vl   Qwen2_5_VisionTransformerPretrainedModel
//   RMSNorm, SwiGLU MLP,
//                                                          window attention
//   qwen3-vl     Qwen3VLVisionModel (also Qwen3-VL-MoE,    LayerNorm, gelu-tanh
//   MLP,
//                Qwen3.5 and Qwen3.5-MoE, whose towers     learned positions,
//                are the same module without DeepStack)    DeepStack mergers
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
// checkpoint maps by name: load_qwen_vision reads config.json and the
// tensors under "model.visual." or "visual." (either layout; the other
// tensors -- the language model -- are never read).
//
// Usage:
//   auto model = frameshard::models::load_qwen_vision("/ckpt/Qwen3-VL-8B");
//   std::vector<at::Tensor> outs = model.tower(input);  // TowerInput
//   // or sharded over a CP group:
//   frameshard::EncodeOptions o;
//   o.plan.world = cp_size;
//   o.plan.layout = frameshard::models::media_layout(model.config);
//   o.plan.cost = frameshard::flop_cost_model(
//       frameshard::models::tower_dims(model.config));
//   auto res = frameshard::encode(model.tower, pixels, grid_thw, pg, o);
//
// Thread-safety: a tower is a torch::nn::Module (forward is re-entrant;
// parameter updates are not).
#pragma once

#include <frameshard/cost.h>
#include <frameshard/frames.h>
#include <frameshard/models/safetensors.h>
#include <frameshard/tower.h>

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace models {

enum class QwenFamily { kQwen2VL, kQwen2_5VL, kQwen3VL };
/// "qwen2-vl", "qwen2.5-vl", "qwen3-vl" (the cost preset names).
std::string to_string(QwenFamily family);

// Configs mirror the Hugging Face vision config fields (names and
// defaults); `rope_theta` is rope_parameters.rope_theta (default 10000).

/// Qwen2VLVisionConfig.
struct Qwen2VLVisionConfig {
  int64_t depth = 32;
  int64_t embed_dim = 1280;    // tower width
  int64_t hidden_size = 3584;  // merger output: the language model's width
  std::string hidden_act = "quick_gelu";
  double mlp_ratio = 4;  // MLP width int(embed_dim * mlp_ratio)
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  double rope_theta = 10000.0;

  int64_t intermediate_size() const;
  int64_t in_features() const;  // in_channels * temporal * patch^2
};

/// Qwen2_5_VLVisionConfig. HF's class default hidden_size is 3584; the
/// released 3B/7B/32B/72B checkpoints set 1280.
struct Qwen2_5VLVisionConfig {
  int64_t depth = 32;
  int64_t hidden_size = 3584;  // tower width
  std::string hidden_act = "silu";
  int64_t intermediate_size = 3420;
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  int64_t window_size = 112;  // pixels
  int64_t out_hidden_size = 3584;
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  double rope_theta = 10000.0;

  int64_t in_features() const;
  /// Merged tokens per window side: window_size / spatial_merge_size /
  /// patch_size (integer division, as HF).
  int64_t merger_window_size() const;
};

/// Qwen3VLVisionConfig (and Qwen3_5VisionConfig: deepstack empty).
struct Qwen3VLVisionConfig {
  int64_t depth = 27;
  int64_t hidden_size = 1152;  // tower width
  std::string hidden_act = "gelu_pytorch_tanh";
  int64_t intermediate_size = 4304;
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 16;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  int64_t out_hidden_size = 3584;
  int64_t num_position_embeddings = 2304;
  std::vector<int64_t> deepstack_visual_indexes = {8, 16, 24};
  double rope_theta = 10000.0;

  int64_t in_features() const;
  /// int(sqrt(num_position_embeddings)): the side of the learned grid.
  int64_t num_grid_per_side() const;
};

/// A config.json's vision tower: the family and its config (only the
/// member of `family` is meaningful).
struct QwenVisionConfig {
  QwenFamily family = QwenFamily::kQwen3VL;
  std::string model_type = "qwen3_vl";  // config.json "model_type"
  Qwen2VLVisionConfig qwen2_vl;
  Qwen2_5VLVisionConfig qwen2_5_vl;
  Qwen3VLVisionConfig qwen3_vl;

  int64_t in_features() const;
  int64_t spatial_merge_size() const;
  int64_t temporal_patch_size() const;
  /// Width of every output (the language model's hidden size).
  int64_t out_hidden_size() const;
  /// "embeddings", then "deepstack_0", "deepstack_1", ... (Qwen3-VL).
  std::vector<std::string> output_names() const;
};

/// Parses a Hugging Face config.json text. The model_type selects the
/// family: qwen2_vl; qwen2_5_vl; qwen3_vl and qwen3_vl_moe; qwen3_5 and
/// qwen3_5_moe (the Qwen3-VL tower without DeepStack). The vision fields
/// come from "vision_config" (a bare vision config, model_type
/// "<family>_vision", is accepted too); missing fields take HF's defaults,
/// wrongly typed or invalid ones raise naming `source` and the field.
QwenVisionConfig parse_qwen_vision_config(
    const std::string& json_text, const std::string& source = "config.json");
/// Reads `path`: a config.json file or a directory holding one.
QwenVisionConfig load_qwen_vision_config(const std::string& path);

/// Cost-model dimensions of a tower (frameshard::flop_cost_model).
TowerDims tower_dims(const Qwen2VLVisionConfig& config);
TowerDims tower_dims(const Qwen2_5VLVisionConfig& config);
TowerDims tower_dims(const Qwen3VLVisionConfig& config);
TowerDims tower_dims(const QwenVisionConfig& config);
/// The planner's media layout (merge and temporal patch sizes).
MediaLayout media_layout(const QwenVisionConfig& config);

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

/// A tower of any family behind one interface.
struct QwenVisionModel {
  QwenVisionConfig config;
  /// The tower module; its parameters carry HF's names below the prefix.
  std::shared_ptr<torch::nn::Module> module;
  /// Its forward.
  VisionTower tower;
  // Set by load_qwen_vision.
  std::string weight_prefix;  // "model.visual." or "visual."
  std::vector<std::string> weight_files;
  int64_t tensors_loaded = 0;
  int64_t tensors_ignored = 0;  // other tensors of the checkpoint (unread)
};

/// A randomly initialised float32 tower of `config`'s family.
QwenVisionModel make_qwen_vision(const QwenVisionConfig& config);

struct QwenLoadOptions {
  /// Parameter dtype: float32, bfloat16 or float16 (float64 for tests).
  at::ScalarType dtype = at::kFloat;
  /// Checkpoint name prefix of the tower; empty: detect "model.visual." or
  /// "visual." (a checkpoint holding both is an error).
  std::string prefix;
};

/// What load_vision_weights did.
struct WeightLoadReport {
  std::string prefix;
  int64_t loaded = 0;
  int64_t ignored = 0;  // checkpoint tensors outside the prefix
  std::vector<std::string> files;
};

/// Copies the checkpoint tensors named prefix + <parameter name> into
/// `module`'s parameters, converting to options.dtype (the module is cast
/// to it). Raises, listing them, for missing tensors, unexpected tensors
/// under the prefix, shape mismatches and non-floating dtypes; nothing is
/// copied unless all match. `what` names the tower in errors.
WeightLoadReport load_vision_weights(
    torch::nn::Module& module,
    const SafetensorsCheckpoint& checkpoint,
    const QwenLoadOptions& options = {},
    const std::string& what = "vision tower");

/// config.json + safetensors (one file or a sharded index) of `model_dir`.
QwenVisionModel load_qwen_vision(
    const std::string& model_dir, const QwenLoadOptions& options = {});

/// The module's parameters under HF names (prefix + name), detached CPU
/// copies: save_safetensors(path, vision_state_dict(*m.module)) writes a
/// checkpoint load_qwen_vision reads back.
std::map<std::string, at::Tensor> vision_state_dict(
    const torch::nn::Module& module,
    const std::string& prefix = "model.visual.");

}  // namespace models
}  // namespace frameshard
