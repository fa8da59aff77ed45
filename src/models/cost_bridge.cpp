// Tower configs -> the core's cost dimensions and media layout (see
// frameshard/models/cost_bridge.h).
#include <frameshard/models/cost_bridge.h>

#include <set>

namespace frameshard {
namespace models {

TowerDims tower_dims(const Qwen2VLVisionConfig& c) {
  TowerDims d;
  d.name = "qwen2-vl";
  d.depth = c.depth;
  d.hidden = c.embed_dim;
  d.intermediate = c.intermediate_size();
  d.mergers = 1;
  d.merge_size = c.spatial_merge_size;
  d.out_hidden = c.hidden_size;  // the merger's output width
  return d;
}

TowerDims tower_dims(const Qwen2_5VLVisionConfig& c) {
  TowerDims d;
  d.name = "qwen2.5-vl";
  d.depth = c.depth;
  d.hidden = c.hidden_size;
  d.intermediate = c.intermediate_size;
  d.gated_mlp = true;
  const int64_t side = c.merger_window_size() * c.spatial_merge_size;
  d.window_patches = side * side;  // pre-merge patches per window
  std::set<int64_t> full(
      c.fullatt_block_indexes.begin(), c.fullatt_block_indexes.end());
  for (int64_t i : full) {
    if (i >= 0 && i < c.depth) {
      d.full_attention_layers.push_back(i);
    }
  }
  d.mergers = 1;
  d.merge_size = c.spatial_merge_size;
  d.out_hidden = c.out_hidden_size;
  return d;
}

TowerDims tower_dims(const Qwen3VLVisionConfig& c) {
  TowerDims d;
  d.name = "qwen3-vl";
  d.depth = c.depth;
  d.hidden = c.hidden_size;
  d.intermediate = c.intermediate_size;
  // The merger and one DeepStack merger per listed layer.
  d.mergers = 1 + static_cast<int64_t>(c.deepstack_visual_indexes.size());
  d.merge_size = c.spatial_merge_size;
  d.out_hidden = c.out_hidden_size;
  return d;
}

TowerDims tower_dims(const RadioVisionConfig& c) {
  TowerDims d;
  d.name = "radio";
  d.depth = c.depth;
  d.hidden = c.hidden_size;
  d.intermediate = c.intermediate_size();
  d.mergers = 1;  // the pixel shuffle and the projector
  d.merge_size = c.spatial_merge_size;
  d.merger_hidden = c.projector_hidden_size;
  d.out_hidden = c.out_hidden_size;
  d.prefix_tokens = c.prefix_tokens();
  return d;
}

TowerDims tower_dims(const QwenVisionConfig& c) {
  TowerDims d = c.visit([](const auto& v) { return tower_dims(v); });
  // Qwen3.5's tower is Qwen3-VL's: only the preset name differs.
  if (c.family() == QwenFamily::kQwen3VL &&
      c.model_type.compare(0, 7, "qwen3_5") == 0) {
    d.name = "qwen3.5";
  }
  return d;
}

MediaLayout media_layout(const QwenVisionConfig& c) {
  MediaLayout l;
  l.spatial_merge_size = c.spatial_merge_size();
  l.temporal_patch_size = c.temporal_patch_size();
  return l;
}

bool takes_pieces(const QwenVisionConfig& c) {
  return c.family() != QwenFamily::kRadio;
}

int64_t split_window_side(const QwenVisionConfig& c) {
  if (c.family() != QwenFamily::kQwen2_5VL) {
    return 0;
  }
  const auto& v = c.as<Qwen2_5VLVisionConfig>();
  return v.merger_window_size() * v.spatial_merge_size;
}

}  // namespace models
}  // namespace frameshard
