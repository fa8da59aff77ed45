// File: frameshard/models/hf_weights.h
//
// Hugging Face checkpoint tensors <-> a tower module's parameters, by name:
// the tower's parameter names are HF's below a prefix ("model.visual." in
// transformers >= 4.52, "visual." before), so loading is a name-by-name
// copy, checked all at once: one error lists every missing, unexpected,
// mis-shaped and wrongly typed tensor, and nothing is copied unless all
// match. The other tensors of the checkpoint (the language model) are
// never read.
//
// Usage:
//   auto ckpt = frameshard::models::SafetensorsCheckpoint::open(model_dir);
//   frameshard::models::WeightLoadReport r =
//       frameshard::models::load_vision_weights(*module, ckpt);
//   frameshard::models::save_safetensors(
//       "tower.safetensors", frameshard::models::vision_state_dict(*module));
#pragma once

#include <frameshard/models/safetensors.h>

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace frameshard {
namespace models {

struct QwenLoadOptions {
  /// Parameter dtype: float32, bfloat16 or float16 (float64 for tests).
  at::ScalarType dtype = at::kFloat;
  /// Checkpoint name prefix of the tower; empty: detect "model.visual." or
  /// "visual." (a checkpoint holding both is an error).
  std::string prefix;
};

/// A tower whose tensors sit at the checkpoint's top level beside the
/// language model's instead of under one prefix (Nemotron Omni:
/// "vision_model.", "vision_projector.", "mlp1." beside "language_model."):
/// its parameters are named from the root, the checkpoint tensors under
/// `roots` are the tower's, the names in `unused` among them are read by
/// nothing, and a parameter whose name ends with one of `optional` may be
/// absent (it keeps its initial value: RADIO's layer scales, which NVIDIA's
/// checkpoints omit). Empty: the tower is under a prefix.
struct WeightScope {
  std::vector<std::string> roots;
  std::vector<std::string> unused;
  std::vector<std::string> optional;
};

/// What load_vision_weights did.
struct WeightLoadReport {
  std::string prefix;  // "model.visual." or "visual." (or the one given;
                       // "" for a scoped tower)
  int64_t loaded = 0;
  int64_t ignored = 0;    // checkpoint tensors outside the tower (unread)
  int64_t defaulted = 0;  // optional parameters the checkpoint lacks
  std::vector<std::string> files;
};

/// Copies the checkpoint tensors named prefix + <parameter name> into
/// `module`'s parameters, converting to options.dtype (the module is cast
/// to it). Raises, listing them, for missing tensors, unexpected tensors
/// under the prefix, shape mismatches and non-floating dtypes; nothing is
/// copied unless all match. `what` names the tower in errors; a non-empty
/// `scope` places the tower (options.prefix must then be empty).
WeightLoadReport load_vision_weights(
    torch::nn::Module& module,
    const SafetensorsCheckpoint& checkpoint,
    const QwenLoadOptions& options = {},
    const std::string& what = "vision tower",
    const WeightScope& scope = {});

/// The module's parameters under HF names (prefix + name), detached CPU
/// copies: save_safetensors(path, vision_state_dict(*m.module)) writes a
/// checkpoint load_vision_weights reads back.
std::map<std::string, at::Tensor> vision_state_dict(
    const torch::nn::Module& module,
    const std::string& prefix = "model.visual.");

}  // namespace models
}  // namespace frameshard
