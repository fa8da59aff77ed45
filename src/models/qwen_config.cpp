// The Qwen vision configs' derived sizes and QwenVisionConfig's accessors
// (see frameshard/models/qwen_config.h).
#include <frameshard/models/qwen_config.h>

#include "tower/check.h"

#include <cmath>

namespace frameshard {
namespace models {

namespace {

// Features of one packed pixel row: HF's Conv3d kernel, flattened.
template <typename C>
int64_t patch_features(const C& c) {
  return c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size;
}

const char* default_model_type(QwenFamily family) {
  switch (family) {
    case QwenFamily::kQwen2VL:
      return "qwen2_vl";
    case QwenFamily::kQwen2_5VL:
      return "qwen2_5_vl";
    case QwenFamily::kRadio:
      return "nemotron_h_omni";
    case QwenFamily::kQwen3VL:
      break;
  }
  return "qwen3_vl";
}

}  // namespace

std::string to_string(QwenFamily family) {
  switch (family) {
    case QwenFamily::kQwen2VL:
      return "qwen2-vl";
    case QwenFamily::kQwen2_5VL:
      return "qwen2.5-vl";
    case QwenFamily::kQwen3VL:
      return "qwen3-vl";
    case QwenFamily::kRadio:
      return "radio";
  }
  return "unknown";
}

// ------------------------------------------------------- family configs

int64_t Qwen2VLVisionConfig::intermediate_size() const {
  // HF: int(embed_dim * mlp_ratio).
  return static_cast<int64_t>(static_cast<double>(embed_dim) * mlp_ratio);
}

int64_t Qwen2VLVisionConfig::in_features() const {
  return patch_features(*this);
}

int64_t Qwen2_5VLVisionConfig::in_features() const {
  return patch_features(*this);
}

int64_t Qwen2_5VLVisionConfig::merger_window_size() const {
  return window_size / spatial_merge_size / patch_size;
}

int64_t Qwen3VLVisionConfig::in_features() const {
  return patch_features(*this);
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

int64_t RadioVisionConfig::intermediate_size() const {
  // HF RadioMLP: int(hidden_size * mlp_ratio).
  return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio);
}

int64_t RadioVisionConfig::in_features() const {
  return in_channels * patch_size * patch_size;  // RadioConfig.patch_dim
}

int64_t RadioVisionConfig::prefix_tokens() const {
  return num_cls_tokens + num_registers;
}

int64_t RadioVisionConfig::grid_per_side() const {
  return max_img_size / patch_size;  // RadioPatchEmbeddings.max_rows
}

// ------------------------------------------------------- any family

QwenVisionConfig::QwenVisionConfig(Qwen2VLVisionConfig config)
    : QwenVisionConfig(
          std::move(config), default_model_type(QwenFamily::kQwen2VL)) {}

QwenVisionConfig::QwenVisionConfig(Qwen2_5VLVisionConfig config)
    : QwenVisionConfig(
          std::move(config), default_model_type(QwenFamily::kQwen2_5VL)) {}

QwenVisionConfig::QwenVisionConfig(Qwen3VLVisionConfig config)
    : QwenVisionConfig(
          std::move(config), default_model_type(QwenFamily::kQwen3VL)) {}

QwenVisionConfig::QwenVisionConfig(RadioVisionConfig config)
    : QwenVisionConfig(
          std::move(config), default_model_type(QwenFamily::kRadio)) {}

QwenVisionConfig::QwenVisionConfig(
    QwenFamilyConfig config, std::string model_type)
    : model_type(std::move(model_type)), family_config(std::move(config)) {}

void QwenVisionConfig::require_family(QwenFamily expected) const {
  FRAMESHARD_TORCH_CHECK(
      family() == expected,
      "QwenVisionConfig::as",
      "expected a ",
      to_string(expected),
      " config, got a ",
      to_string(family()),
      " one (model_type \"",
      model_type,
      "\")");
}

int64_t QwenVisionConfig::in_features() const {
  return visit([](const auto& c) { return c.in_features(); });
}

int64_t QwenVisionConfig::spatial_merge_size() const {
  return visit([](const auto& c) { return c.spatial_merge_size; });
}

int64_t QwenVisionConfig::temporal_patch_size() const {
  return visit([](const auto& c) { return c.temporal_patch_size; });
}

int64_t QwenVisionConfig::out_hidden_size() const {
  return visit([](const auto& c) -> int64_t {
    using C = std::decay_t<decltype(c)>;
    if constexpr (std::is_same<C, Qwen2VLVisionConfig>::value) {
      return c.hidden_size;  // Qwen2-VL's name for the merger output

    } else {
      return c.out_hidden_size;
    }
  });
}

std::vector<std::string> QwenVisionConfig::output_names() const {
  std::vector<std::string> names{"embeddings"};
  if (const auto* c = std::get_if<Qwen3VLVisionConfig>(&family_config)) {
    for (size_t k = 0; k < c->deepstack_visual_indexes.size(); ++k) {
      names.push_back("deepstack_" + std::to_string(k));
    }
  }
  return names;
}

}  // namespace models
}  // namespace frameshard
