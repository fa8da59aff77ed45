// Nemotron Omni's config.json fields (see radio_json.h).
#include "models/radio_json.h"

#include "io/json_text.h"
#include "tower/check.h"

namespace frameshard {
namespace models {
namespace detail {

namespace {

using nlohmann::json;

// j[key] as an object (absent or null: empty).
const json& object_at(
    const json& j, const char* key, const std::string& source, const char* fn) {
  static const json kEmpty = json::object();
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return kEmpty;
  }
  FRAMESHARD_TORCH_CHECK(
      it->is_object(),
      fn,
      "expected ",
      key,
      " to be an object in ",
      source,
      ", got ",
      it->type_name());
  return *it;
}

// A boolean option of vision_config that must hold `expected` (what the
// tower builds); absent or null takes RadioConfig's default, which does.
void require_flag(
    const json& vision,
    const char* key,
    bool expected,
    const std::string& source,
    const char* fn) {
  auto it = vision.find(key);
  if (it == vision.end() || it->is_null()) {
    return;
  }
  FRAMESHARD_TORCH_CHECK(
      it->is_boolean() && it->get<bool>() == expected,
      fn,
      "expected vision_config.",
      key,
      " to be ",
      expected ? "true" : "false",
      " in ",
      source,
      " (the RADIO layout frameshard builds), got ",
      json_detail::json_excerpt(*it));
}

}  // namespace

const std::vector<Field<RadioVisionConfig>>& radio_vision_fields() {
  using C = RadioVisionConfig;
  static const std::vector<Field<C>> kFields = {
      {"num_hidden_layers", &C::depth, FieldKind::kInteger},
      {"hidden_size", &C::hidden_size, FieldKind::kInteger},
      {"num_attention_heads", &C::num_heads, FieldKind::kInteger},
      {"mlp_ratio", &C::mlp_ratio, FieldKind::kNumber},
      {"hidden_act", &C::hidden_act, FieldKind::kString},
      {"layer_norm_eps", &C::layer_norm_eps, FieldKind::kNumber},
      {"num_channels", &C::in_channels, FieldKind::kInteger},
      {"patch_size", &C::patch_size, FieldKind::kSize},
      {"max_img_size", &C::max_img_size, FieldKind::kInteger},
      {"num_cls_tokens", &C::num_cls_tokens, FieldKind::kCount},
      {"num_registers", &C::num_registers, FieldKind::kCount},
  };
  return kFields;
}

void read_radio_outer(
    const json& j,
    RadioVisionConfig& c,
    const std::string& source,
    const char* fn) {
  const json& vision = object_at(j, "vision_config", source, fn);
  require_flag(vision, "use_swiglu_ffn", false, source, fn);
  require_flag(vision, "qkv_bias", true, source, fn);

  const FieldReader top(j, "", source, fn);
  top.read(
      "projector_hidden_size", FieldKind::kInteger, c.projector_hidden_size);
  double ratio = 0.5;
  top.read("downsample_ratio", FieldKind::kNumber, ratio);
  FRAMESHARD_TORCH_CHECK(
      ratio == 0.5,
      fn,
      "expected downsample_ratio 0.5 (a 2 x 2 pixel shuffle, as transformers' "
      "get_image_features assumes) in ",
      source,
      ", got ",
      ratio);
  int64_t vision_hidden = c.hidden_size;
  top.read("vision_hidden_size", FieldKind::kInteger, vision_hidden);
  FRAMESHARD_TORCH_CHECK(
      vision_hidden == c.hidden_size,
      fn,
      "expected vision_hidden_size to equal vision_config.hidden_size (",
      c.hidden_size,
      ", the projector's input is the RADIO width) in ",
      source,
      ", got ",
      vision_hidden);

  const FieldReader text(
      object_at(j, "text_config", source, fn), "text_config", source, fn);
  text.read("hidden_size", FieldKind::kInteger, c.out_hidden_size);
  int64_t mtp_layers = c.final_layernorm ? 1 : 0;
  text.read("num_nextn_predict_layers", FieldKind::kCount, mtp_layers);
  c.final_layernorm = mtp_layers > 0;
}

void write_radio_outer(json& j, const RadioVisionConfig& c, const char* fn) {
  j["vision_config"]["model_type"] = "radio";
  FieldWriter top(j, "", fn);
  top.write(
      "projector_hidden_size", FieldKind::kInteger, c.projector_hidden_size);
  top.write("vision_hidden_size", FieldKind::kInteger, c.hidden_size);
  top.write("downsample_ratio", FieldKind::kNumber, 0.5);
  json text = json::object();
  FieldWriter tw(text, "text_config", fn);
  tw.write("hidden_size", FieldKind::kInteger, c.out_hidden_size);
  tw.write(
      "num_nextn_predict_layers",
      FieldKind::kCount,
      int64_t{c.final_layernorm ? 1 : 0});
  j["text_config"] = text;
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
