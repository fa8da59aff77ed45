// File: frameshard/models/qwen_factory.h
//
// A tower of any family (Qwen-VL, Nemotron Omni RADIO) behind one interface:
// built from a QwenVisionConfig (random weights) or loaded from a Hugging Face
// model directory (config.json + model.safetensors or a sharded index).
//
// Usage:
//   auto model = frameshard::models::load_qwen_vision("/ckpt/Qwen3-VL-8B");
//   std::vector<at::Tensor> outs = model.tower(input);  // TowerInput
//   model.weights->loaded;  // tensors read; model.weights->prefix, files
#pragma once

#include <frameshard/models/hf_weights.h>
#include <frameshard/models/qwen_config.h>
#include <frameshard/tower.h>

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

namespace frameshard {
namespace models {

struct QwenVisionModel {
  QwenVisionConfig config;
  /// The tower module; its parameters carry HF's names below the prefix.
  std::shared_ptr<torch::nn::Module> module;
  /// Its forward.
  VisionTower tower;
  /// What load_qwen_vision loaded; empty for make_qwen_vision's towers.
  std::optional<WeightLoadReport> weights;
};

/// A randomly initialised float32 tower of `config`'s family.
QwenVisionModel make_qwen_vision(const QwenVisionConfig& config);

/// config.json + safetensors (one file or a sharded index) of `model_dir`.
QwenVisionModel load_qwen_vision(
    const std::string& model_dir, const QwenLoadOptions& options = {});

}  // namespace models
}  // namespace frameshard
