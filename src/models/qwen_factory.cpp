// QwenVisionModel from a config or a Hugging Face model directory (see
// frameshard/models/qwen_factory.h).
#include <frameshard/models/qwen_factory.h>

#include <frameshard/models/hf_config.h>
#include <frameshard/models/qwen_towers.h>
#include <frameshard/models/radio_tower.h>

namespace frameshard {
namespace models {

namespace {

// The tower module of each family config.
Qwen2VLVisionTower make_tower(const Qwen2VLVisionConfig& c) {
  return Qwen2VLVisionTower(c);
}
Qwen2_5VLVisionTower make_tower(const Qwen2_5VLVisionConfig& c) {
  return Qwen2_5VLVisionTower(c);
}
Qwen3VLVisionTower make_tower(const Qwen3VLVisionConfig& c) {
  return Qwen3VLVisionTower(c);
}
RadioVisionTower make_tower(const RadioVisionConfig& c) {
  return RadioVisionTower(c);
}

// Where the family's tensors sit: under one prefix for the Qwen towers;
// beside the language model for Nemotron Omni (radio_tower.h).
WeightScope weight_scope(const QwenVisionConfig& config) {
  WeightScope scope;
  if (config.family() == QwenFamily::kRadio) {
    scope.roots = {"vision_model.", "vision_projector.", "mlp1."};
    scope.unused = radio_unused_tensors();
    scope.optional = {".lambda1"};
  }
  return scope;
}

}  // namespace

QwenVisionModel make_qwen_vision(const QwenVisionConfig& config) {
  QwenVisionModel m;
  m.config = config;
  config.visit([&m](const auto& c) {
    auto tower = make_tower(c);
    m.module = tower.ptr();
    m.tower = as_vision_tower(tower);
  });
  return m;
}

QwenVisionModel load_qwen_vision(
    const std::string& model_dir, const QwenLoadOptions& options) {
  QwenVisionModel m = make_qwen_vision(load_qwen_vision_config(model_dir));
  const auto ckpt = SafetensorsCheckpoint::open(model_dir);
  m.weights = load_vision_weights(
      *m.module,
      ckpt,
      options,
      to_string(m.config.family()) + " tower",
      weight_scope(m.config));
  return m;
}

}  // namespace models
}  // namespace frameshard
