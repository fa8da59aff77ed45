// Fuzz target: Hugging Face config.json
// (frameshard::models::parse_qwen_vision_config, src/models/hf_config.cpp and
// json_fields.cpp, compiled into this harness without the models layer).
// Every input must parse or raise c10::Error / frameshard::Error; what parses
// is written back by qwen_vision_config_json (which refuses what the parser
// would refuse), reads back equal, re-serializes to the same text, and its
// derived sizes are computed without overflow.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build with FRAMESHARD_FUZZ_TORCH on):
//   build-fuzz/tests/fuzz/hf_config_fuzz tests/fuzz/corpus/hf_config
//   -max_total_time=30
#include <frameshard/error.h>
#include <frameshard/models/hf_config.h>

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

namespace {

using frameshard::models::QwenVisionConfig;

// Field-by-field equality of the family configs (they have no operator==).
struct SameFields {
  template <typename A, typename B>
  bool operator()(const A&, const B&) const {
    return false;
  }
  bool operator()(
      const frameshard::models::Qwen2VLVisionConfig& a,
      const frameshard::models::Qwen2VLVisionConfig& b) const {
    return a.depth == b.depth && a.embed_dim == b.embed_dim &&
           a.hidden_size == b.hidden_size && a.hidden_act == b.hidden_act &&
           a.mlp_ratio == b.mlp_ratio && a.num_heads == b.num_heads &&
           a.in_channels == b.in_channels && a.patch_size == b.patch_size &&
           a.spatial_merge_size == b.spatial_merge_size &&
           a.temporal_patch_size == b.temporal_patch_size &&
           a.rope_theta == b.rope_theta;
  }
  bool operator()(
      const frameshard::models::Qwen2_5VLVisionConfig& a,
      const frameshard::models::Qwen2_5VLVisionConfig& b) const {
    return a.depth == b.depth && a.hidden_size == b.hidden_size &&
           a.hidden_act == b.hidden_act &&
           a.intermediate_size == b.intermediate_size &&
           a.num_heads == b.num_heads && a.in_channels == b.in_channels &&
           a.patch_size == b.patch_size &&
           a.spatial_merge_size == b.spatial_merge_size &&
           a.temporal_patch_size == b.temporal_patch_size &&
           a.window_size == b.window_size &&
           a.out_hidden_size == b.out_hidden_size &&
           a.fullatt_block_indexes == b.fullatt_block_indexes &&
           a.rope_theta == b.rope_theta;
  }
  bool operator()(
      const frameshard::models::Qwen3VLVisionConfig& a,
      const frameshard::models::Qwen3VLVisionConfig& b) const {
    return a.depth == b.depth && a.hidden_size == b.hidden_size &&
           a.hidden_act == b.hidden_act &&
           a.intermediate_size == b.intermediate_size &&
           a.num_heads == b.num_heads && a.in_channels == b.in_channels &&
           a.patch_size == b.patch_size &&
           a.spatial_merge_size == b.spatial_merge_size &&
           a.temporal_patch_size == b.temporal_patch_size &&
           a.out_hidden_size == b.out_hidden_size &&
           a.num_position_embeddings == b.num_position_embeddings &&
           a.deepstack_visual_indexes == b.deepstack_visual_indexes &&
           a.rope_theta == b.rope_theta;
  }
  bool operator()(
      const frameshard::models::RadioVisionConfig& a,
      const frameshard::models::RadioVisionConfig& b) const {
    return a.depth == b.depth && a.hidden_size == b.hidden_size &&
           a.num_heads == b.num_heads && a.mlp_ratio == b.mlp_ratio &&
           a.hidden_act == b.hidden_act &&
           a.layer_norm_eps == b.layer_norm_eps &&
           a.in_channels == b.in_channels && a.patch_size == b.patch_size &&
           a.max_img_size == b.max_img_size &&
           a.num_cls_tokens == b.num_cls_tokens &&
           a.num_registers == b.num_registers &&
           a.projector_hidden_size == b.projector_hidden_size &&
           a.out_hidden_size == b.out_hidden_size &&
           a.final_layernorm == b.final_layernorm;
  }
};

// Each family's own derived size (UBSan: no overflow; never negative).
int64_t derived(const frameshard::models::Qwen2VLVisionConfig& c) {
  return c.intermediate_size();
}
int64_t derived(const frameshard::models::Qwen2_5VLVisionConfig& c) {
  return c.merger_window_size();
}
int64_t derived(const frameshard::models::Qwen3VLVisionConfig& c) {
  return c.num_grid_per_side();
}
int64_t derived(const frameshard::models::RadioVisionConfig& c) {
  return c.intermediate_size() + c.prefix_tokens() + c.grid_per_side();
}

bool same(const QwenVisionConfig& a, const QwenVisionConfig& b) {
  return a.model_type == b.model_type &&
         std::visit(SameFields{}, a.family_config, b.family_config);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  QwenVisionConfig cfg;
  try {
    cfg = frameshard::models::parse_qwen_vision_config(text, "fuzz.json");
  } catch (const c10::Error&) {
    return 0;
  } catch (const frameshard::Error&) {
    return 0;
  }
  // What parses is valid: the writer (same rules) accepts it, and it reads
  // back equal and writes the same text again.
  const std::string json = frameshard::models::qwen_vision_config_json(cfg);
  const QwenVisionConfig again =
      frameshard::models::parse_qwen_vision_config(json, "again.json");
  if (!same(cfg, again) ||
      frameshard::models::qwen_vision_config_json(again) != json) {
    std::abort();
  }
  // The derived sizes the tower is built from (UBSan: no overflow).
  if (cfg.in_features() < 1 || cfg.spatial_merge_size() < 1 ||
      cfg.temporal_patch_size() < 1 || cfg.out_hidden_size() < 1 ||
      cfg.output_names().empty() ||
      cfg.visit([](const auto& c) { return derived(c); }) < 0) {
    std::abort();
  }
  return 0;
}
