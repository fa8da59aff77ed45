// !!! Internal header of frameshard::models, not installed. !!!
//
// Nemotron Omni's config.json fields (hf_config.cpp reads and writes them):
// the RADIO vision_config table, and the fields outside it that shape the
// vision chain: downsample_ratio (0.5: the 2 x 2 pixel shuffle),
// projector_hidden_size, vision_hidden_size (= vision_config.hidden_size),
// text_config.hidden_size (the projector's output) and
// text_config.num_nextn_predict_layers (> 0: vision_final_layernorm). The
// RADIO options frameshard does not build (use_swiglu_ffn, qkv_bias false)
// are refused by name. Defined in radio_json.cpp.
#pragma once

#include <frameshard/models/qwen_config.h>

#include "models/json_fields.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace detail {

/// vision_config's fields (RadioConfig's names).
const std::vector<Field<RadioVisionConfig>>& radio_vision_fields();

/// Reads the fields of `j` (the whole config.json) outside vision_config
/// and checks vision_config's options; errors name `source` and raise as
/// `fn`.
void read_radio_outer(
    const nlohmann::json& j,
    RadioVisionConfig& c,
    const std::string& source,
    const char* fn);

/// Writes them into `j` (vision_config itself is written by the table).
void write_radio_outer(
    nlohmann::json& j, const RadioVisionConfig& c, const char* fn);

}  // namespace detail
}  // namespace models
}  // namespace frameshard
