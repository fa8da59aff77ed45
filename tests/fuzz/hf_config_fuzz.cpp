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
#include <tuple>
#include <variant>

namespace {

using frameshard::models::QwenVisionConfig;

// Field-by-field equality of the family configs (they have no operator==):
// each family's fields as a tuple of references; a Qwen family's are those
// the three share, then its own.
auto own_fields(const frameshard::models::Qwen2VLVisionConfig& c) {
  return std::tie(c.embed_dim, c.mlp_ratio);
}
auto own_fields(const frameshard::models::Qwen2_5VLVisionConfig& c) {
  return std::tie(
      c.intermediate_size,
      c.window_size,
      c.out_hidden_size,
      c.fullatt_block_indexes);
}
auto own_fields(const frameshard::models::Qwen3VLVisionConfig& c) {
  return std::tie(
      c.intermediate_size,
      c.out_hidden_size,
      c.num_position_embeddings,
      c.deepstack_visual_indexes);
}
template <typename C>
auto fields(const C& c) {
  return std::tuple_cat(
      std::tie(
          c.depth,
          c.hidden_size,
          c.hidden_act,
          c.num_heads,
          c.in_channels,
          c.patch_size,
          c.spatial_merge_size,
          c.temporal_patch_size,
          c.rope_theta),
      own_fields(c));
}
auto fields(const frameshard::models::RadioVisionConfig& c) {
  return std::tie(
      c.depth,
      c.hidden_size,
      c.num_heads,
      c.mlp_ratio,
      c.hidden_act,
      c.layer_norm_eps,
      c.in_channels,
      c.patch_size,
      c.max_img_size,
      c.num_cls_tokens,
      c.num_registers,
      c.projector_hidden_size,
      c.out_hidden_size,
      c.final_layernorm);
}

struct SameFields {
  template <typename A, typename B>
  bool operator()(const A&, const B&) const {
    return false;
  }
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return fields(a) == fields(b);
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
