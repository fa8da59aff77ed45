// Hugging Face config.json <-> QwenVisionConfig (see
// frameshard/models/hf_config.h): the family field tables, the model types
// and the file's layout; typed field I/O is json_fields.cpp.
#include <frameshard/models/hf_config.h>

#include "io/json_text.h"
#include "models/file_checks.h"
#include "models/json_fields.h"
#include "models/radio_json.h"
#include "tower/check.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace frameshard {
namespace models {

namespace {

namespace fs = std::filesystem;
using detail::Field;
using detail::FieldKind;
using nlohmann::json;

constexpr const char* kParseFn = "parse_qwen_vision_config";
constexpr const char* kWriteFn = "qwen_vision_config_json";

// ------------------------------------------------------------ tables
// One table per family: HF's key, the member, the kind. Both the parser and
// the writer walk it, in this order.

// The table of C: the fields every family names alike (HF's names and
// kinds; Qwen2-VL's hidden_size is its merger width, the others' their
// tower width), then the family's `own`, then the rotary base.
template <typename C>
std::vector<Field<C>> family_table(std::vector<Field<C>> own) {
  std::vector<Field<C>> t = {
      {"depth", &C::depth, FieldKind::kInteger},
      {"hidden_size", &C::hidden_size, FieldKind::kInteger},
      {"hidden_act", &C::hidden_act, FieldKind::kString},
      {"num_heads", &C::num_heads, FieldKind::kInteger},
      {"in_channels", &C::in_channels, FieldKind::kInteger},
      {"patch_size", &C::patch_size, FieldKind::kSize},
      {"spatial_merge_size", &C::spatial_merge_size, FieldKind::kInteger},
      {"temporal_patch_size", &C::temporal_patch_size, FieldKind::kSize}};
  t.insert(t.end(), own.begin(), own.end());
  t.push_back({"rope_parameters", &C::rope_theta, FieldKind::kRopeTheta});
  return t;
}

const std::vector<Field<Qwen2VLVisionConfig>>& fields_of(
    const Qwen2VLVisionConfig&) {
  using C = Qwen2VLVisionConfig;
  static const auto kFields = family_table<C>({
      {"embed_dim", &C::embed_dim, FieldKind::kInteger},
      {"mlp_ratio", &C::mlp_ratio, FieldKind::kNumber},
  });
  return kFields;
}

const std::vector<Field<Qwen2_5VLVisionConfig>>& fields_of(
    const Qwen2_5VLVisionConfig&) {
  using C = Qwen2_5VLVisionConfig;
  static const auto kFields = family_table<C>({
      {"intermediate_size", &C::intermediate_size, FieldKind::kInteger},
      {"window_size", &C::window_size, FieldKind::kInteger},
      {"out_hidden_size", &C::out_hidden_size, FieldKind::kInteger},
      {"fullatt_block_indexes",
       &C::fullatt_block_indexes,
       FieldKind::kIndexList},
  });
  return kFields;
}

const std::vector<Field<Qwen3VLVisionConfig>>& fields_of(
    const Qwen3VLVisionConfig&) {
  using C = Qwen3VLVisionConfig;
  static const auto kFields = family_table<C>({
      {"intermediate_size", &C::intermediate_size, FieldKind::kInteger},
      {"out_hidden_size", &C::out_hidden_size, FieldKind::kInteger},
      {"num_position_embeddings",
       &C::num_position_embeddings,
       FieldKind::kInteger},
      {"deepstack_visual_indexes",
       &C::deepstack_visual_indexes,
       FieldKind::kIndexList,
       /*deepstack=*/true},
  });
  return kFields;
}

const std::vector<Field<RadioVisionConfig>>& fields_of(
    const RadioVisionConfig&) {
  return detail::radio_vision_fields();
}

// Fields outside vision_config: only Nemotron Omni's vision chain has them
// (radio_json.h); the Qwen towers are described by vision_config alone.
template <typename C>
void read_outer(const json&, C&, const std::string&) {}
void read_outer(
    const json& j, RadioVisionConfig& c, const std::string& source) {
  detail::read_radio_outer(j, c, source, kParseFn);
}
template <typename C>
void write_outer(json&, const C&) {}
void write_outer(json& j, const RadioVisionConfig& c) {
  detail::write_radio_outer(j, c, kWriteFn);
}

// The model types frameshard reads: each one's family (by its defaults)
// and whether its tower has DeepStack.
struct ModelType {
  const char* model_type;
  QwenFamilyConfig defaults;
  bool deepstack;  // Qwen3.5 has the Qwen3-VL tower without DeepStack
};

const std::vector<ModelType>& model_types() {
  static const std::vector<ModelType> kTypes = {
      {"qwen2_vl", Qwen2VLVisionConfig{}, false},
      {"qwen2_5_vl", Qwen2_5VLVisionConfig{}, false},
      {"qwen3_vl", Qwen3VLVisionConfig{}, true},
      {"qwen3_vl_moe", Qwen3VLVisionConfig{}, true},
      {"qwen3_5", Qwen3VLVisionConfig{}, false},
      {"qwen3_5_moe", Qwen3VLVisionConfig{}, false},
      {"nemotron_h_omni", RadioVisionConfig{}, false},
  };
  return kTypes;
}

// A bare vision config's model_type: "<family model_type>_vision".
constexpr std::string_view kVisionSuffix = "_vision";

bool is_bare(const std::string& type) {
  const size_t n = kVisionSuffix.size();
  return type.size() > n &&
         type.compare(type.size() - n, n, kVisionSuffix) == 0;
}

// The entry of `model_type` (bare or not), or the error of `fn`.
const ModelType& find_model_type(
    const std::string& model_type, const char* fn, const std::string& where) {
  const std::string family_type =
      is_bare(model_type)
          ? model_type.substr(0, model_type.size() - kVisionSuffix.size())
          : model_type;
  for (const auto& t : model_types()) {
    if (family_type == t.model_type) {
      return t;
    }
  }
  FRAMESHARD_TORCH_CHECK(
      false,
      fn,
      "expected model_type qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, "
      "qwen3_5 or qwen3_5_moe (or its \"_vision\" config), or "
      "nemotron_h_omni",
      where,
      ", got \"",
      model_type,
      "\"");
}

// Nemotron Omni's vision chain spans the whole config (vision_config,
// text_config, the projector's fields): it has no bare vision config.
void check_not_bare_radio(
    const ModelType& type,
    bool bare,
    const char* fn,
    const std::string& model_type) {
  FRAMESHARD_TORCH_CHECK(
      !bare || type.defaults.index() != static_cast<size_t>(QwenFamily::kRadio),
      fn,
      "expected model_type nemotron_h_omni (its vision chain reads "
      "text_config and the projector's fields), got \"",
      model_type,
      "\"");
}

json parse_json(const std::string& text, const std::string& source) {
  json j;
  std::string problem;
  FRAMESHARD_TORCH_CHECK(
      json_detail::parse_json_strict(text, j, problem),
      kParseFn,
      "expected JSON in ",
      source,
      ", got ",
      problem);
  return j;
}

// The object holding the vision fields: j itself for a bare vision config,
// else j["vision_config"] (absent or null: HF's defaults).
const json& vision_object(const json& j, bool bare, const std::string& source) {
  static const json kEmpty = json::object();
  if (bare) {
    return j;
  }
  auto it = j.find("vision_config");
  if (it == j.end() || it->is_null()) {
    return kEmpty;
  }
  FRAMESHARD_TORCH_CHECK(
      it->is_object(),
      kParseFn,
      "expected vision_config to be an object in ",
      source,
      ", got ",
      it->type_name());
  return *it;
}

// The patch features in_channels * temporal_patch_size * patch_size^2 (the
// patch embedding's input width) at most kMaxVisionInteger: each factor is
// within its own limit, but their product is not (65536^4 overflows
// int64_t, and a width of 2^30 sizes the patch embedding).
template <typename C>
void check_patch_features(
    const C& c,
    const char* fn,
    const std::string& where,
    const std::string& in) {
  const int64_t depth_area = c.in_channels * c.temporal_patch_size;
  const int64_t patch_area = c.patch_size * c.patch_size;  // <= 2^32 each
  FRAMESHARD_TORCH_CHECK(
      depth_area <= kMaxVisionInteger && patch_area <= kMaxVisionInteger &&
          depth_area * patch_area <= kMaxVisionInteger,
      fn,
      "expected ",
      where,
      "in_channels * ",
      where,
      "temporal_patch_size * ",
      where,
      "patch_size^2 (the patch features) <= ",
      kMaxVisionInteger,
      in,
      ", got ",
      c.in_channels,
      " * ",
      c.temporal_patch_size,
      " * ",
      c.patch_size,
      "^2");
}

std::string read_text(const std::string& path, const char* fn) {
  detail::check_regular_file(path, fn);
  std::ifstream in(path);
  FRAMESHARD_TORCH_CHECK(in, fn, "cannot open ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// `path`, or `path`/config.json for a directory.
std::string config_file(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string()
                                    : path;
}

}  // namespace

QwenVisionConfig parse_qwen_vision_config(
    const std::string& json_text, const std::string& source) {
  const json j = parse_json(json_text, source);
  FRAMESHARD_TORCH_CHECK(
      j.is_object() && j.contains("model_type") && j["model_type"].is_string(),
      kParseFn,
      "expected an object with a string \"model_type\" in ",
      source,
      ", got ",
      j.is_object() ? "no model_type" : j.type_name());
  const std::string model_type = j["model_type"].get<std::string>();
  const ModelType& type =
      find_model_type(model_type, kParseFn, " in " + source);
  const bool bare = is_bare(model_type);
  check_not_bare_radio(type, bare, kParseFn, model_type);

  QwenVisionConfig cfg(type.defaults, model_type);
  const detail::FieldReader reader(
      vision_object(j, bare, source),
      bare ? "" : "vision_config",
      source,
      kParseFn);
  cfg.visit([&](auto& c) {
    detail::read_fields(reader, fields_of(c), c, type.deepstack);
    read_outer(j, c, source);
    check_patch_features(
        c, kParseFn, bare ? "" : "vision_config.", " in " + source);
  });
  return cfg;
}

QwenVisionConfig load_qwen_vision_config(const std::string& path) {
  const std::string file = config_file(path);
  return parse_qwen_vision_config(
      read_text(file, "load_qwen_vision_config"), file);
}

std::string qwen_vision_config_json(const QwenVisionConfig& config) {
  const ModelType& type = find_model_type(config.model_type, kWriteFn, "");
  const auto family = static_cast<QwenFamily>(type.defaults.index());
  FRAMESHARD_TORCH_CHECK(
      family == config.family(),
      kWriteFn,
      "expected a model_type of the ",
      to_string(config.family()),
      " family for a ",
      to_string(config.family()),
      " config, got \"",
      config.model_type,
      "\" (",
      to_string(family),
      ")");
  const bool bare = is_bare(config.model_type);
  check_not_bare_radio(type, bare, kWriteFn, config.model_type);

  json vision = json::object();
  detail::FieldWriter writer(vision, bare ? "" : "vision_config", kWriteFn);
  config.visit([&](const auto& c) {
    detail::write_fields(writer, fields_of(c), c, type.deepstack);
    check_patch_features(c, kWriteFn, bare ? "" : "vision_config.", "");
  });
  json j = bare ? vision : json{{"vision_config", vision}};
  config.visit([&](const auto& c) { write_outer(j, c); });
  j["model_type"] = config.model_type;
  return j.dump(2) + "\n";
}

void save_qwen_vision_config(
    const std::string& path, const QwenVisionConfig& config) {
  const char* fn = "save_qwen_vision_config";
  const std::string text = qwen_vision_config_json(config);
  const std::string file = config_file(path);
  std::ofstream out(file, std::ios::trunc);
  FRAMESHARD_TORCH_CHECK(out, fn, "cannot open ", file, " for writing");
  out << text;
  out.flush();
  FRAMESHARD_TORCH_CHECK(out.good(), fn, "failed writing ", file);
}

}  // namespace models
}  // namespace frameshard
