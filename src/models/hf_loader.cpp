// Hugging Face config.json and safetensors -> Qwen vision towers (see
// frameshard/models/qwen_vision.h): config parsing with HF's defaults, the
// cost-model dimensions, and name-by-name weight loading with one error
// that lists every missing, unexpected and mis-shaped tensor.
#include <frameshard/models/qwen_vision.h>

#include "models/file_checks.h"
#include "tower/check.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

namespace frameshard {
namespace models {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kParseFn = "parse_qwen_vision_config";

// Reads typed fields of one JSON object; a missing or null field keeps the
// default (HF's), a wrongly typed one raises naming the field and source.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string where, std::string source)
      : obj_(obj), where_(std::move(where)), source_(std::move(source)) {}

  const json* find(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      return nullptr;
    }
    return &*it;
  }

  void integer(const char* key, int64_t& out, int64_t min = 1) const {
    const json* v = find(key);
    if (!v) {
      return;
    }
    FRAMESHARD_TORCH_CHECK(
        v->is_number_integer() && v->get<int64_t>() >= min,
        kParseFn,
        "expected ",
        name(key),
        " to be an integer >= ",
        min,
        " in ",
        source_,
        ", got ",
        v->dump());
    out = v->get<int64_t>();
  }

  void number(const char* key, double& out) const {
    const json* v = find(key);
    if (!v) {
      return;
    }
    FRAMESHARD_TORCH_CHECK(
        v->is_number() && v->get<double>() > 0,
        kParseFn,
        "expected ",
        name(key),
        " to be a positive number in ",
        source_,
        ", got ",
        v->dump());
    out = v->get<double>();
  }

  void string(const char* key, std::string& out) const {
    const json* v = find(key);
    if (!v) {
      return;
    }
    FRAMESHARD_TORCH_CHECK(
        v->is_string(),
        kParseFn,
        "expected ",
        name(key),
        " to be a string in ",
        source_,
        ", got ",
        v->dump());
    out = v->get<std::string>();
  }

  void integer_list(const char* key, std::vector<int64_t>& out) const {
    const json* v = find(key);
    if (!v) {
      return;
    }
    bool ok = v->is_array();
    std::vector<int64_t> values;
    for (size_t i = 0; ok && i < v->size(); ++i) {
      ok = (*v)[i].is_number_integer() && (*v)[i].get<int64_t>() >= 0;
      if (ok) {
        values.push_back((*v)[i].get<int64_t>());
      }
    }
    FRAMESHARD_TORCH_CHECK(
        ok,
        kParseFn,
        "expected ",
        name(key),
        " to be a list of non-negative integers in ",
        source_,
        ", got ",
        v->dump());
    out = values;
  }

  // patch_size / temporal_patch_size: an integer or a list of equal ones.
  void size(const char* key, int64_t& out) const {
    const json* v = find(key);
    if (!v) {
      return;
    }
    if (v->is_array()) {
      bool ok = !v->empty();
      for (size_t i = 0; ok && i < v->size(); ++i) {
        ok = (*v)[i].is_number_integer() && (*v)[i] == (*v)[0] &&
             (*v)[i].get<int64_t>() >= 1;
      }
      FRAMESHARD_TORCH_CHECK(
          ok,
          kParseFn,
          "expected ",
          name(key),
          " to be a positive integer or a list of equal ones in ",
          source_,
          ", got ",
          v->dump());
      out = (*v)[0].get<int64_t>();
      return;
    }
    integer(key, out);
  }

  // rope_parameters.rope_theta (or a flat rope_theta); the vision rotary
  // is HF's "axial" type.
  void rope(double& theta) const {
    number("rope_theta", theta);
    const json* r = find("rope_parameters");
    if (!r) {
      return;
    }
    FRAMESHARD_TORCH_CHECK(
        r->is_object(),
        kParseFn,
        "expected ",
        name("rope_parameters"),
        " to be an object in ",
        source_,
        ", got ",
        r->dump());
    FieldReader rr(*r, name("rope_parameters"), source_);
    rr.number("rope_theta", theta);
    std::string type = "axial";
    rr.string("rope_type", type);
    FRAMESHARD_TORCH_CHECK(
        type == "axial" || type == "default",
        kParseFn,
        "expected ",
        name("rope_parameters"),
        ".rope_type \"axial\" in ",
        source_,
        ", got \"",
        type,
        "\"");
  }

 private:
  std::string name(const char* key) const {
    return where_.empty() ? std::string(key) : where_ + "." + key;
  }
  const json& obj_;
  std::string where_;
  std::string source_;
};

struct FamilyType {
  const char* model_type;
  QwenFamily family;
  bool deepstack;  // Qwen3.5 has the Qwen3-VL tower without DeepStack
};
const FamilyType kFamilies[] = {
    {"qwen2_vl", QwenFamily::kQwen2VL, false},
    {"qwen2_5_vl", QwenFamily::kQwen2_5VL, false},
    {"qwen3_vl", QwenFamily::kQwen3VL, true},
    {"qwen3_vl_moe", QwenFamily::kQwen3VL, true},
    {"qwen3_5", QwenFamily::kQwen3VL, false},
    {"qwen3_5_moe", QwenFamily::kQwen3VL, false},
};

std::string read_text(const std::string& path, const char* fn) {
  detail::check_regular_file(path, fn);
  std::ifstream in(path);
  FRAMESHARD_TORCH_CHECK(in, fn, "cannot open ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

// "a, b, c and 4 more".
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::ostringstream os;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) {
    os << (i ? ", " : "") << names[i];
  }
  if (names.size() > kShown) {
    os << " and " << names.size() - kShown << " more";
  }
  return os.str();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// `f` applied to the config of c's family (the other two are unused).
template <typename F>
auto visit_family(const QwenVisionConfig& c, F&& f) {
  switch (c.family) {
    case QwenFamily::kQwen2VL:
      return f(c.qwen2_vl);
    case QwenFamily::kQwen2_5VL:
      return f(c.qwen2_5_vl);
    case QwenFamily::kQwen3VL:
      break;
  }
  return f(c.qwen3_vl);
}

}  // namespace

std::string to_string(QwenFamily family) {
  switch (family) {
    case QwenFamily::kQwen2VL:
      return "qwen2-vl";
    case QwenFamily::kQwen2_5VL:
      return "qwen2.5-vl";
    case QwenFamily::kQwen3VL:
      return "qwen3-vl";
  }
  return "unknown";
}

// ------------------------------------------------------------ config

int64_t QwenVisionConfig::in_features() const {
  return visit_family(*this, [](const auto& c) { return c.in_features(); });
}

int64_t QwenVisionConfig::spatial_merge_size() const {
  return visit_family(
      *this, [](const auto& c) { return c.spatial_merge_size; });
}

int64_t QwenVisionConfig::temporal_patch_size() const {
  return visit_family(
      *this, [](const auto& c) { return c.temporal_patch_size; });
}

int64_t QwenVisionConfig::out_hidden_size() const {
  return visit_family(*this, [](const auto& c) -> int64_t {
    using C = std::decay_t<decltype(c)>;
    if constexpr (std::is_same<C, Qwen2VLVisionConfig>::value) {
      return c.hidden_size;  // Qwen2-VL's name for the merger output
    } else {
      return c.out_hidden_size;
    }
  });
}

std::vector<std::string> QwenVisionConfig::output_names() const {
  std::vector<std::string> names{"embeddings"};
  if (family == QwenFamily::kQwen3VL) {
    for (size_t k = 0; k < qwen3_vl.deepstack_visual_indexes.size(); ++k) {
      names.push_back("deepstack_" + std::to_string(k));
    }
  }
  return names;
}

QwenVisionConfig parse_qwen_vision_config(
    const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    FRAMESHARD_TORCH_CHECK(
        false,
        kParseFn,
        "expected JSON in ",
        source,
        ", got a parse error: ",
        e.what());
  }
  FRAMESHARD_TORCH_CHECK(
      j.is_object() && j.contains("model_type") && j["model_type"].is_string(),
      kParseFn,
      "expected an object with a string \"model_type\" in ",
      source,
      ", got ",
      j.is_object() ? "no model_type" : j.type_name());
  QwenVisionConfig cfg;
  cfg.model_type = j["model_type"].get<std::string>();

  // A bare vision config ("<family>_vision") or a full model config.
  std::string family_type = cfg.model_type;
  const std::string suffix = "_vision";
  const bool bare =
      family_type.size() > suffix.size() &&
      family_type.compare(
          family_type.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (bare) {
    family_type.resize(family_type.size() - suffix.size());
  }
  const FamilyType* ft = nullptr;
  for (const auto& f : kFamilies) {
    if (family_type == f.model_type) {
      ft = &f;
    }
  }
  FRAMESHARD_TORCH_CHECK(
      ft != nullptr,
      kParseFn,
      "expected model_type qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, "
      "qwen3_5 or qwen3_5_moe (or its \"_vision\" config) in ",
      source,
      ", got \"",
      cfg.model_type,
      "\"");
  cfg.family = ft->family;

  static const json kEmpty = json::object();
  const json* vision = &j;
  std::string where;
  if (!bare) {
    where = "vision_config";
    auto it = j.find("vision_config");
    if (it == j.end() || it->is_null()) {
      vision = &kEmpty;  // HF: the vision config's defaults
    } else {
      FRAMESHARD_TORCH_CHECK(
          it->is_object(),
          kParseFn,
          "expected vision_config to be an object in ",
          source,
          ", got ",
          it->type_name());
      vision = &*it;
    }
  }
  const FieldReader r(*vision, where, source);
  switch (cfg.family) {
    case QwenFamily::kQwen2VL: {
      auto& c = cfg.qwen2_vl;
      r.integer("depth", c.depth);
      r.integer("embed_dim", c.embed_dim);
      r.integer("hidden_size", c.hidden_size);
      r.string("hidden_act", c.hidden_act);
      r.number("mlp_ratio", c.mlp_ratio);
      r.integer("num_heads", c.num_heads);
      r.integer("in_channels", c.in_channels);
      r.size("patch_size", c.patch_size);
      r.integer("spatial_merge_size", c.spatial_merge_size);
      r.size("temporal_patch_size", c.temporal_patch_size);
      r.rope(c.rope_theta);
      break;
    }
    case QwenFamily::kQwen2_5VL: {
      auto& c = cfg.qwen2_5_vl;
      r.integer("depth", c.depth);
      r.integer("hidden_size", c.hidden_size);
      r.string("hidden_act", c.hidden_act);
      r.integer("intermediate_size", c.intermediate_size);
      r.integer("num_heads", c.num_heads);
      r.integer("in_channels", c.in_channels);
      r.size("patch_size", c.patch_size);
      r.integer("spatial_merge_size", c.spatial_merge_size);
      r.size("temporal_patch_size", c.temporal_patch_size);
      r.integer("window_size", c.window_size);
      r.integer("out_hidden_size", c.out_hidden_size);
      r.integer_list("fullatt_block_indexes", c.fullatt_block_indexes);
      r.rope(c.rope_theta);
      break;
    }
    case QwenFamily::kQwen3VL: {
      auto& c = cfg.qwen3_vl;
      r.integer("depth", c.depth);
      r.integer("hidden_size", c.hidden_size);
      r.string("hidden_act", c.hidden_act);
      r.integer("intermediate_size", c.intermediate_size);
      r.integer("num_heads", c.num_heads);
      r.integer("in_channels", c.in_channels);
      r.size("patch_size", c.patch_size);
      r.integer("spatial_merge_size", c.spatial_merge_size);
      r.size("temporal_patch_size", c.temporal_patch_size);
      r.integer("out_hidden_size", c.out_hidden_size);
      r.integer("num_position_embeddings", c.num_position_embeddings);
      if (ft->deepstack) {
        r.integer_list("deepstack_visual_indexes", c.deepstack_visual_indexes);
      } else {
        c.deepstack_visual_indexes.clear();  // Qwen3.5: no DeepStack
      }
      r.rope(c.rope_theta);
      break;
    }
  }
  return cfg;
}

QwenVisionConfig load_qwen_vision_config(const std::string& path) {
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec)
                               ? (fs::path(path) / "config.json").string()
                               : path;
  return parse_qwen_vision_config(
      read_text(file, "load_qwen_vision_config"), file);
}

// ------------------------------------------------------------ cost dims

TowerDims tower_dims(const Qwen2VLVisionConfig& c) {
  TowerDims d;
  d.name = "qwen2-vl";
  d.depth = c.depth;
  d.hidden = c.embed_dim;
  d.intermediate = c.intermediate_size();
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
  return d;
}

TowerDims tower_dims(const Qwen3VLVisionConfig& c) {
  TowerDims d;
  d.name = "qwen3-vl";
  d.depth = c.depth;
  d.hidden = c.hidden_size;
  d.intermediate = c.intermediate_size;
  return d;
}

TowerDims tower_dims(const QwenVisionConfig& c) {
  TowerDims d = visit_family(c, [](const auto& v) { return tower_dims(v); });
  if (c.family == QwenFamily::kQwen3VL &&
      starts_with(c.model_type, "qwen3_5")) {
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

// ------------------------------------------------------------ towers

QwenVisionModel make_qwen_vision(const QwenVisionConfig& config) {
  QwenVisionModel m;
  m.config = config;
  auto hold = [&m](auto tower) {
    m.module = tower.ptr();
    m.tower = as_vision_tower(tower);
  };
  switch (config.family) {
    case QwenFamily::kQwen2VL:
      hold(Qwen2VLVisionTower(config.qwen2_vl));
      break;
    case QwenFamily::kQwen2_5VL:
      hold(Qwen2_5VLVisionTower(config.qwen2_5_vl));
      break;
    case QwenFamily::kQwen3VL:
      hold(Qwen3VLVisionTower(config.qwen3_vl));
      break;
  }
  return m;
}

WeightLoadReport load_vision_weights(
    torch::nn::Module& module,
    const SafetensorsCheckpoint& ckpt,
    const QwenLoadOptions& options,
    const std::string& what) {
  const char* fn = "load_vision_weights";
  const at::ScalarType dtype = options.dtype;
  FRAMESHARD_TORCH_CHECK(
      dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf ||
          dtype == at::kDouble,
      fn,
      "expected dtype float32, bfloat16, float16 or float64, got ",
      dtype);
  const std::vector<std::string> names = ckpt.names();
  WeightLoadReport report;
  report.files = ckpt.files();
  report.prefix = options.prefix;
  if (report.prefix.empty()) {
    // HF saves the tower as "model.visual." (transformers >= 4.52) or
    // "visual." (earlier releases and the original checkpoints).
    int64_t nested = 0, flat = 0;
    for (const auto& n : names) {
      nested += starts_with(n, "model.visual.");
      flat += starts_with(n, "visual.");
    }
    FRAMESHARD_TORCH_CHECK(
        !(nested > 0 && flat > 0),
        fn,
        "expected the ",
        what,
        " under one prefix in ",
        ckpt.source(),
        ", got both \"model.visual.\" (",
        nested,
        " tensors) and \"visual.\" (",
        flat,
        " tensors); pass QwenLoadOptions::prefix");
    FRAMESHARD_TORCH_CHECK(
        nested > 0 || flat > 0,
        fn,
        "expected tensors named \"model.visual.*\" or \"visual.*\" (the ",
        what,
        ") in ",
        ckpt.source(),
        ", got none among its ",
        names.size(),
        " tensors",
        names.empty() ? std::string() : " (" + name_list(names) + ")");
    report.prefix = nested > 0 ? "model.visual." : "visual.";
  }
  const std::string& prefix = report.prefix;

  std::map<std::string, at::Tensor> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    params.emplace(item.key(), item.value());
  }
  std::vector<std::string> missing, unexpected, misshaped, bad_dtype;
  std::set<std::string> found;
  for (const auto& n : names) {
    if (!starts_with(n, prefix)) {
      ++report.ignored;
      continue;
    }
    const std::string local = n.substr(prefix.size());
    auto it = params.find(local);
    if (it == params.end()) {
      unexpected.push_back(n);
      continue;
    }
    found.insert(local);
    const SafetensorsEntry& e = ckpt.entry(n);
    if (!at::IntArrayRef(e.shape).equals(it->second.sizes())) {
      misshaped.push_back(
          n + " (expected " + shape_text(it->second.sizes()) + ", got " +
          shape_text(e.shape) + ")");
    } else if (
        e.dtype == at::ScalarType::Undefined || !at::isFloatingType(e.dtype)) {
      bad_dtype.push_back(n + " (" + e.dtype_name + ")");
    }
  }
  for (const auto& kv : params) {
    if (!found.count(kv.first)) {
      missing.push_back(prefix + kv.first);
    }
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty() ||
      !bad_dtype.empty()) {
    std::ostringstream os;
    const char* sep = "";
    auto part = [&](const std::vector<std::string>& v, const char* label) {
      if (!v.empty()) {
        os << sep << v.size() << " " << label << ": " << name_list(v);
        sep = "; ";
      }
    };
    part(missing, "missing");
    part(unexpected, "unexpected");
    part(misshaped, "mis-shaped");
    part(bad_dtype, "not F64/F32/F16/BF16");
    FRAMESHARD_TORCH_CHECK(
        false,
        fn,
        "expected the ",
        params.size(),
        " tensors of the ",
        what,
        " under \"",
        prefix,
        "\" in ",
        ckpt.source(),
        ", got ",
        os.str());
  }

  module.to(dtype);
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    item.value().copy_(ckpt.read(prefix + item.key()).to(dtype));
    ++report.loaded;
  }
  return report;
}

QwenVisionModel load_qwen_vision(
    const std::string& model_dir, const QwenLoadOptions& options) {
  QwenVisionModel m = make_qwen_vision(load_qwen_vision_config(model_dir));
  const auto ckpt = SafetensorsCheckpoint::open(model_dir);
  const WeightLoadReport r = load_vision_weights(
      *m.module, ckpt, options, to_string(m.config.family) + " tower");
  m.weight_prefix = r.prefix;
  m.weight_files = r.files;
  m.tensors_loaded = r.loaded;
  m.tensors_ignored = r.ignored;
  return m;
}

std::map<std::string, at::Tensor> vision_state_dict(
    const torch::nn::Module& module, const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    out.emplace(
        prefix + item.key(), item.value().detach().to(at::kCPU).clone());
  }
  return out;
}

}  // namespace models
}  // namespace frameshard
