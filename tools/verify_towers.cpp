// The towers of `frameshard verify` (verify_towers.h).
#include "verify_towers.h"

#include <frameshard/error.h>
#include <frameshard/models/qwen_vision.h>
#include <frameshard/models/toy_tower.h>

namespace frameshard {
namespace cli {

namespace {

constexpr int64_t kWidth = 32;
constexpr int64_t kPatch = 4;  // 3 * temporal 2 * 4^2 = 96 features, as toy

// A small config of `name`'s family with the workload's layout.
models::QwenVisionConfig small_config(
    const std::string& name, const MediaLayout& layout) {
  auto common = [&](auto& c) {
    c.depth = 2;
    c.num_heads = 2;
    c.patch_size = kPatch;
    c.spatial_merge_size = layout.spatial_merge_size;
    c.temporal_patch_size = layout.temporal_patch_size;
  };
  if (name == "qwen2-vl") {
    models::Qwen2VLVisionConfig c;
    common(c);
    c.embed_dim = kWidth;
    c.hidden_size = kWidth;
    c.mlp_ratio = 2;
    return c;
  }
  if (name == "qwen2.5-vl") {
    models::Qwen2_5VLVisionConfig c;
    common(c);
    c.hidden_size = kWidth;
    c.intermediate_size = 2 * kWidth;
    c.out_hidden_size = kWidth;
    // Windows of 2 x 2 merged tokens; the second layer attends the frame.
    c.window_size = 2 * layout.spatial_merge_size * kPatch;
    c.fullatt_block_indexes = {1};
    return c;
  }
  models::Qwen3VLVisionConfig c;
  common(c);
  c.hidden_size = kWidth;
  c.intermediate_size = 2 * kWidth;
  c.out_hidden_size = kWidth;
  c.num_position_embeddings = 64;
  c.deepstack_visual_indexes = {0};
  return c;
}

}  // namespace

std::vector<std::string> verify_tower_names() {
  return {"toy", "qwen2-vl", "qwen2.5-vl", "qwen3-vl"};
}

VerifyTower verify_tower(const std::string& name, const MediaLayout& layout) {
  const auto names = verify_tower_names();
  FRAMESHARD_CHECK(
      std::find(names.begin(), names.end(), name) != names.end(),
      "verify",
      "--tower: expected toy, qwen2-vl, qwen2.5-vl or qwen3-vl, got ",
      name);
  VerifyTower t;
  if (name == "toy") {
    models::ToyTowerOptions o;
    o.temporal_patch_size = layout.temporal_patch_size;
    o.spatial_merge_size = layout.spatial_merge_size;
    t.in_features = o.in_features();
    t.output_names = {"embeddings", "deepstack"};
    t.factory = [o](at::ScalarType dtype) {
      models::ToyTower tower(o);
      tower->to(dtype);
      return parity::module_instance(
          models::as_vision_tower(tower), tower.ptr());
    };
    return t;
  }
  const models::QwenVisionConfig config = small_config(name, layout);
  t.in_features = config.in_features();
  t.output_names = config.output_names();
  t.window_side = models::split_window_side(config);
  t.factory = [config](at::ScalarType dtype) {
    models::QwenVisionModel m = models::make_qwen_vision(config);
    m.module->to(dtype);
    return parity::module_instance(m.tower, m.module);
  };
  return t;
}

}  // namespace cli
}  // namespace frameshard
