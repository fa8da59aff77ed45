// The VLM's parts from a recipe (vlm_parts.h).
#include "train/vlm_parts.h"

#include <frameshard/error.h>
#include <frameshard/models/qwen_config.h>
#include <frameshard/splitmix64.h>

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <vector>

namespace frameshard {
namespace train {
namespace detail {
namespace {

// DeepStack layers spread evenly over the tower, as Qwen3-VL's {8, 16, 24}
// of 27: layer (i + 1) * depth / (k + 1) - 1 for i < k.
std::vector<int64_t> deepstack_indexes(int64_t depth, int64_t k) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < k; ++i) {
    idx.push_back(std::max<int64_t>(0, (i + 1) * depth / (k + 1) - 1));
  }
  return idx;
}

models::QwenVisionConfig random_tower_config(const ModelConfig& m) {
  const int64_t mlp = 2 * m.vision_hidden;
  if (m.tower == "qwen2-vl") {
    models::Qwen2VLVisionConfig c;
    c.depth = m.vision_depth;
    c.embed_dim = m.vision_hidden;
    c.hidden_size = m.text_hidden;
    c.num_heads = m.vision_heads;
    c.mlp_ratio = 2;
    return c;
  }
  if (m.tower == "qwen2.5-vl") {
    models::Qwen2_5VLVisionConfig c;
    c.depth = m.vision_depth;
    c.hidden_size = m.vision_hidden;
    c.intermediate_size = mlp;
    c.num_heads = m.vision_heads;
    c.out_hidden_size = m.text_hidden;
    c.fullatt_block_indexes = {m.vision_depth - 1};
    return c;
  }
  if (m.tower == "radio") {
    // Nemotron Omni's chain at the recipe's sizes: 16-pixel patches (the
    // presets' grids), 2 cls + 2 register tokens, a 32 x 32 position
    // table, the projector twice the language model's width.
    models::RadioVisionConfig c;
    c.depth = m.vision_depth;
    c.hidden_size = m.vision_hidden;
    c.num_heads = m.vision_heads;
    c.mlp_ratio = 2;
    c.max_img_size = 32 * c.patch_size;
    c.num_cls_tokens = 2;
    c.num_registers = 2;
    c.projector_hidden_size = 2 * m.text_hidden;
    c.out_hidden_size = m.text_hidden;
    c.final_layernorm = true;
    return c;
  }
  FRAMESHARD_CHECK(
      m.tower == "qwen3-vl",
      "make_tower",
      "expected model.tower qwen2-vl, qwen2.5-vl, qwen3-vl or radio, got '",
      m.tower,
      "'");
  models::Qwen3VLVisionConfig c;
  c.depth = m.vision_depth;
  c.hidden_size = m.vision_hidden;
  c.intermediate_size = mlp;
  c.num_heads = m.vision_heads;
  c.out_hidden_size = m.text_hidden;
  c.deepstack_visual_indexes =
      deepstack_indexes(m.vision_depth, m.deepstack_layers);
  return c;
}

}  // namespace

at::ScalarType parse_train_dtype(const std::string& name) {
  if (name == "float32") {
    return at::kFloat;
  }
  if (name == "float64") {
    return at::kDouble;
  }
  FRAMESHARD_CHECK(
      name == "bfloat16",
      "train",
      "expected train.dtype float32, float64 or bfloat16, got '",
      name,
      "'");
  return at::kBFloat16;
}

models::QwenVisionModel make_tower(
    const ModelConfig& model, at::ScalarType dtype) {
  if (!model.model_dir.empty()) {
    models::QwenLoadOptions o;
    o.dtype = dtype;
    return models::load_qwen_vision(model.model_dir, o);
  }
  models::QwenVisionModel m =
      models::make_qwen_vision(random_tower_config(model));
  m.module->to(dtype);
  return m;
}

DecoderConfig decoder_config(const ModelConfig& model, int64_t tower_width) {
  DecoderConfig d;
  d.hidden = tower_width;
  d.layers = model.text_layers;
  d.heads = model.text_heads;
  d.ffn = model.text_ffn;
  d.vocab = model.vocab_size;
  return d;
}

at::Tensor synthetic_pixels(
    int64_t rows,
    int64_t features,
    uint64_t seed,
    int64_t step,
    int64_t dp_rank,
    at::ScalarType dtype) {
  SplitMix64 mix(seed ^ 0x5eed91c5ULL);
  uint64_t s = mix.next() +
               static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ULL +
               static_cast<uint64_t>(dp_rank) * 0xbf58476d1ce4e5b9ULL;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s);
  at::Tensor x =
      at::randn({rows, features}, gen, at::TensorOptions().dtype(at::kFloat));
  return x.to(dtype);
}

at::Tensor media_pixels(
    const std::vector<GridThw>& grid,
    const std::vector<uint64_t>& seeds,
    int64_t features,
    at::ScalarType dtype) {
  FRAMESHARD_CHECK(
      seeds.size() == grid.size(),
      "train",
      "expected one pixel seed per medium (",
      grid.size(),
      "), got ",
      seeds.size());
  // A repeat is drawn once and shared (the draw, not the seed, costs).
  std::map<uint64_t, at::Tensor> drawn;
  std::vector<at::Tensor> parts;
  for (std::size_t m = 0; m < grid.size(); ++m) {
    const int64_t rows = grid[m].t * grid[m].h * grid[m].w;
    auto it = drawn.find(seeds[m]);
    if (it == drawn.end() || it->second.size(0) != rows) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seeds[m]);
      at::Tensor x = at::randn(
          {rows, features}, gen, at::TensorOptions().dtype(at::kFloat));
      it = drawn.insert_or_assign(seeds[m], x.to(dtype)).first;
    }
    parts.push_back(it->second);
  }
  if (parts.empty()) {
    return at::zeros({0, features}, at::TensorOptions().dtype(dtype));
  }
  return at::cat(parts, 0);
}

}  // namespace detail
}  // namespace train
}  // namespace frameshard
