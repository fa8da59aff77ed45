// File: frameshard/models/qwen_config.h
//
// The vision-tower configs of the Qwen-VL family and of Nemotron Omni's RADIO,
// mirroring the Hugging Face config classes (field names and class
// defaults), and QwenVisionConfig: the config of one tower of any family (the
// name is the first family's), a std::variant of the four plus config.json's
// model_type. Plain values: no LibTorch.
// Reading and writing config.json is frameshard/models/hf_config.h.
//
// Usage:
//   frameshard::models::Qwen2_5VLVisionConfig v;
//   v.hidden_size = 1280;
//   frameshard::models::QwenVisionConfig c = v;  // model_type "qwen2_5_vl"
//   c.in_features();                             // 3 * 2 * 14 * 14
//   c.as<frameshard::models::Qwen2_5VLVisionConfig>().window_size = 112;
//   int64_t w = c.visit([](const auto& f) { return f.depth; });
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace frameshard {
namespace models {

/// The tower families, in the order of QwenFamilyConfig's alternatives.
enum class QwenFamily { kQwen2VL, kQwen2_5VL, kQwen3VL, kRadio };
/// "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "radio" (the cost preset names).
std::string to_string(QwenFamily family);

// `rope_theta` is rope_parameters.rope_theta (default 10000).

/// Largest tower, in parameters, that the towers build (2^32, 16 GiB in
/// float32; the largest released Qwen vision tower has about 0.7e9): each
/// config field has its own limit (hf_config.h), but depth 256 at width
/// 65536 would still ask for terabytes. Checked before any allocation.
constexpr int64_t kMaxTowerParameters = int64_t{1} << 32;

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

/// Nemotron Omni's vision chain (transformers' NemotronH_Omni_Reasoning_V3
/// get_image_features): the RADIO encoder (RadioConfig: vision_config), the
/// optional final LayerNorm, the 2 x 2 pixel shuffle (downsample_ratio 0.5)
/// and the projector (RMSNorm, Linear, relu^2, Linear to text_config's
/// hidden_size). The input conditioner is external (the processor
/// normalises), as in the Omni model. Pixel rows are RADIO's packed patches:
/// C * patch^2 features, each frame's patches row-major.
struct RadioVisionConfig {
  // vision_config (RadioConfig)
  int64_t depth = 32;  // num_hidden_layers
  int64_t hidden_size = 1280;
  int64_t num_heads = 16;  // num_attention_heads
  double mlp_ratio = 4;    // MLP width int(hidden_size * mlp_ratio)
  std::string hidden_act = "gelu";
  double layer_norm_eps = 1e-6;
  int64_t in_channels = 3;  // num_channels
  int64_t patch_size = 16;
  int64_t max_img_size = 2048;  // position table (max_img_size / patch)^2
  int64_t num_cls_tokens = 3;
  int64_t num_registers = 7;
  // The Omni config
  int64_t projector_hidden_size = 4096;
  int64_t out_hidden_size = 4096;  // text_config.hidden_size
  /// text_config.num_nextn_predict_layers > 0 builds vision_final_layernorm.
  bool final_layernorm = false;
  // Fixed by the checked layout: the 2 x 2 pixel shuffle merges like a
  // spatial merge of 2, and every frame is one image (no temporal patch).
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 1;

  int64_t intermediate_size() const;  // int(hidden_size * mlp_ratio)
  int64_t in_features() const;        // in_channels * patch^2
  int64_t prefix_tokens() const;      // num_cls_tokens + num_registers
  int64_t grid_per_side() const;      // max_img_size / patch_size
};

/// One family's config; alternative i is QwenFamily i.
using QwenFamilyConfig = std::variant<
    Qwen2VLVisionConfig,
    Qwen2_5VLVisionConfig,
    Qwen3VLVisionConfig,
    RadioVisionConfig>;

/// The family of config type C (a compile-time QwenFamilyConfig index).
template <typename C>
constexpr QwenFamily family_of() {
  static_assert(
      std::is_same<C, Qwen2VLVisionConfig>::value ||
          std::is_same<C, Qwen2_5VLVisionConfig>::value ||
          std::is_same<C, Qwen3VLVisionConfig>::value ||
          std::is_same<C, RadioVisionConfig>::value,
      "not a vision config");
  if (std::is_same<C, Qwen2VLVisionConfig>::value) {
    return QwenFamily::kQwen2VL;
  }
  if (std::is_same<C, RadioVisionConfig>::value) {
    return QwenFamily::kRadio;
  }
  return std::is_same<C, Qwen2_5VLVisionConfig>::value ? QwenFamily::kQwen2_5VL
                                                       : QwenFamily::kQwen3VL;
}

/// A config.json's vision tower: config.json's model_type and the config
/// of its family (Qwen3.5 is model_type "qwen3_5" with a Qwen3-VL config
/// whose deepstack_visual_indexes are empty).
struct QwenVisionConfig {
  /// Qwen3-VL's defaults, model_type "qwen3_vl".
  QwenVisionConfig() = default;
  /// A family's config under that family's model_type ("qwen2_vl",
  /// "qwen2_5_vl", "qwen3_vl", "nemotron_h_omni"); implicit, so a family
  /// config converts.
  QwenVisionConfig(Qwen2VLVisionConfig config);
  QwenVisionConfig(Qwen2_5VLVisionConfig config);
  QwenVisionConfig(Qwen3VLVisionConfig config);
  QwenVisionConfig(RadioVisionConfig config);
  /// Any model_type of the family ("qwen3_vl_moe", "qwen3_5", bare
  /// "<type>_vision"); not checked here, qwen_vision_config_json checks it.
  QwenVisionConfig(QwenFamilyConfig config, std::string model_type);

  std::string model_type = "qwen3_vl";  // config.json "model_type"
  QwenFamilyConfig family_config = Qwen3VLVisionConfig{};

  QwenFamily family() const {
    return static_cast<QwenFamily>(family_config.index());
  }
  /// The family config as C; throws naming both families if it is another.
  template <typename C>
  const C& as() const {
    require_family(family_of<C>());
    return std::get<C>(family_config);
  }
  template <typename C>
  C& as() {
    require_family(family_of<C>());
    return std::get<C>(family_config);
  }
  /// std::visit(f, family_config).
  template <typename F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), family_config);
  }
  template <typename F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), family_config);
  }

  int64_t in_features() const;
  int64_t spatial_merge_size() const;
  int64_t temporal_patch_size() const;
  /// Width of every output (the language model's hidden size).
  int64_t out_hidden_size() const;
  /// "embeddings", then "deepstack_0", "deepstack_1", ... (Qwen3-VL).
  std::vector<std::string> output_names() const;

 private:
  void require_family(QwenFamily expected) const;
};

}  // namespace models
}  // namespace frameshard
