// !!! Internal header of frameshard::train, not installed. !!!
//
// Building the VLM's parts from a recipe: the tower (random, of the family
// and size model.* asks for, or a Hugging Face checkpoint's), the decoder
// config, the plan layout. Defined in src/train/vlm_parts.cpp.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/models/qwen_factory.h>
#include <frameshard/train/decoder.h>
#include <frameshard/train/train_config.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace train {
namespace detail {

/// The tower of `model` (seeded by the caller), in `dtype`.
models::QwenVisionModel make_tower(
    const ModelConfig& model, at::ScalarType dtype);

/// The decoder of `model`, its width the tower's output width.
DecoderConfig decoder_config(const ModelConfig& model, int64_t tower_width);

/// "float32" -> at::kFloat, ... (frameshard::Error for others).
at::ScalarType parse_train_dtype(const std::string& name);

/// Seeded pixel rows [rows, features] for a batch, on the CPU; the same
/// (seed, step, dp_rank) gives the same values on every machine.
at::Tensor synthetic_pixels(
    int64_t rows,
    int64_t features,
    uint64_t seed,
    int64_t step,
    int64_t dp_rank,
    at::ScalarType dtype);

/// The pixel rows of media drawn one by one, medium m's [t*h*w, features]
/// from seeds[m] alone (BatchLayout::media_seed), so equal seeds give
/// bit-identical rows; on the CPU.
at::Tensor media_pixels(
    const std::vector<GridThw>& grid,
    const std::vector<uint64_t>& seeds,
    int64_t features,
    at::ScalarType dtype);

}  // namespace detail
}  // namespace train
}  // namespace frameshard
