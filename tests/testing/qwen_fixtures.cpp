// Shared fixtures of the Qwen tower tests (see qwen_fixtures.h).
#include "testing/qwen_fixtures.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <sstream>

namespace frameshard {
namespace models {

void PrintTo(QwenFamily family, std::ostream* os) {
  *os << to_string(family);
}

}  // namespace models

namespace testing {

using models::QwenFamily;
using models::QwenVisionConfig;
using models::QwenVisionModel;

std::string sci(double v) {
  std::ostringstream os;
  os << std::scientific << std::setprecision(2) << v;
  return os.str();
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) {
    return 0.0;
  }
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

at::Tensor grid_tensor(const std::vector<GridThw>& grid) {
  std::vector<int64_t> flat;
  for (const auto& g : grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  return at::tensor(flat, at::kLong).reshape({-1, 3});
}

at::Tensor cu_tensor(const std::vector<GridThw>& grid) {
  std::vector<int32_t> cu{0};
  for (const auto& g : grid) {
    for (int64_t t = 0; t < g.t; ++t) {
      cu.push_back(cu.back() + static_cast<int32_t>(g.h * g.w));
    }
  }
  return at::tensor(cu, at::kInt);
}

int64_t patch_rows(const std::vector<GridThw>& grid) {
  int64_t n = 0;
  for (const auto& g : grid) {
    n += g.patches();
  }
  return n;
}

const std::vector<GridThw> kMixed = {
    {1, 4, 6}, {2, 6, 4}, {1, 2, 2}, {3, 4, 4}, {1, 6, 10}};

std::string family_name(const ::testing::TestParamInfo<QwenFamily>& info) {
  switch (info.param) {
    case QwenFamily::kQwen2VL:
      return "Qwen2VL";
    case QwenFamily::kQwen2_5VL:
      return "Qwen2_5VL";
    case QwenFamily::kQwen3VL:
      return "Qwen3VL";
    case QwenFamily::kRadio:
      return "Radio";
  }
  return "unknown";
}

QwenVisionConfig tiny_config(QwenFamily family) {
  switch (family) {
    case QwenFamily::kQwen2VL: {
      models::Qwen2VLVisionConfig v;
      v.depth = 2;
      v.embed_dim = 32;
      v.hidden_size = 24;
      v.mlp_ratio = 2;
      v.num_heads = 2;
      v.patch_size = 2;
      return v;
    }
    case QwenFamily::kQwen2_5VL: {
      models::Qwen2_5VLVisionConfig v;
      v.depth = 2;
      v.hidden_size = 32;
      v.intermediate_size = 48;
      v.num_heads = 2;
      v.patch_size = 2;
      v.window_size = 8;
      v.out_hidden_size = 24;
      v.fullatt_block_indexes = {1};
      return v;
    }
    case QwenFamily::kRadio: {
      models::RadioVisionConfig v;
      v.depth = 2;
      v.hidden_size = 32;
      v.num_heads = 2;
      v.mlp_ratio = 1.5;
      v.patch_size = 2;
      v.max_img_size = 8;  // a 4 x 4 table, resampled up and down
      v.num_cls_tokens = 2;
      v.num_registers = 1;
      v.projector_hidden_size = 40;
      v.out_hidden_size = 24;
      v.final_layernorm = true;
      return v;
    }
    case QwenFamily::kQwen3VL:
      break;
  }
  models::Qwen3VLVisionConfig v;
  v.depth = 2;
  v.hidden_size = 32;
  v.intermediate_size = 48;
  v.num_heads = 2;
  v.patch_size = 2;
  v.out_hidden_size = 24;
  v.num_position_embeddings = 16;
  v.deepstack_visual_indexes = {0, 1};
  return v;
}

std::string hf_config_json(const QwenVisionConfig& c) {
  static const std::map<QwenFamily, const char*> kVisionType = {
      {QwenFamily::kQwen2VL, "qwen2_vl_vision"},
      {QwenFamily::kQwen2_5VL, "qwen2_5_vl_vision"},
      {QwenFamily::kQwen3VL, "qwen3_vl_vision"}};
  nlohmann::json j = nlohmann::json::parse(models::qwen_vision_config_json(c));
  nlohmann::json& v = j["vision_config"];
  v["model_type"] = kVisionType.at(c.family());
  v["initializer_range"] = 0.02;
  if (c.family() == QwenFamily::kQwen2_5VL) {
    v["tokens_per_second"] = 4;
  }
  j["architectures"] = {"ForConditionalGeneration"};
  j["text_config"] = {{"hidden_size", c.out_hidden_size()}, {"vocab_size", 16}};
  j["transformers_version"] = "5.0.0";
  return j.dump(2);
}

void randomize(torch::nn::Module& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& item : m.named_parameters()) {
    at::Tensor& p = item.value();
    const std::string& name = item.key();
    const bool norm = name.find("norm") != std::string::npos ||
                      name.find("ln_q") != std::string::npos;
    const bool weight =
        name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    if (norm) {
      p.copy_(weight ? 1 + 0.2 * at::randn_like(p) : 0.1 * at::randn_like(p));
    } else if (name.find("pos_embed") != std::string::npos) {
      p.copy_(at::randn_like(p));
    } else if (p.dim() >= 2) {
      const double fan_in = static_cast<double>(p.numel() / p.size(0));
      p.copy_(at::randn_like(p) * (1.5 / std::sqrt(fan_in)));
    } else {
      p.copy_(0.1 * at::randn_like(p));
    }
  }
}

QwenVisionModel random_model(
    const QwenVisionConfig& c, at::ScalarType dtype, uint64_t seed) {
  QwenVisionModel m = models::make_qwen_vision(c);
  m.module->to(dtype);
  randomize(*m.module, seed);
  return m;
}

QwenVisionModel with_parameters_of(
    const QwenVisionConfig& config,
    const QwenVisionModel& src,
    const std::function<std::string(std::string)>& source_name) {
  QwenVisionModel m = models::make_qwen_vision(config);
  const auto dtype = src.module->parameters()[0].scalar_type();
  m.module->to(dtype);
  torch::NoGradGuard no_grad;
  auto from = src.module->named_parameters();
  for (auto& item : m.module->named_parameters()) {
    item.value().copy_(
        from[source_name ? source_name(item.key()) : item.key()]);
  }
  return m;
}

QwenVisionModel clone_model(const QwenVisionModel& src) {
  return with_parameters_of(src.config, src);
}

std::vector<at::Tensor> run_tower(
    const QwenVisionModel& m,
    const at::Tensor& pixels,
    const std::vector<GridThw>& grid) {
  TowerInput in;
  in.pixel_values = pixels;
  in.grid_thw = grid_tensor(grid);
  in.cu_seqlens = cu_tensor(grid);
  return m.tower(in);
}

at::Tensor random_pixels(
    const QwenVisionConfig& c,
    const std::vector<GridThw>& grid,
    at::ScalarType dtype) {
  return at::randn({patch_rows(grid), c.in_features()}, at::kDouble).to(dtype);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(
      std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_model_dir(
    const std::string& dir,
    const QwenVisionModel& m,
    const std::string& prefix,
    int shards) {
  write_bytes(dir + "/config.json", hf_config_json(m.config));
  auto tensors = models::vision_state_dict(*m.module, prefix);
  tensors["model.language_model.embed_tokens.weight"] = at::ones({16, 4});
  if (shards == 1) {
    models::save_safetensors(
        dir + "/model.safetensors", tensors, {{"format", "pt"}});
    return;
  }
  std::vector<std::map<std::string, at::Tensor>> parts(shards);
  nlohmann::json weight_map = nlohmann::json::object();
  int i = 0;
  for (const auto& kv : tensors) {
    const int s = i++ % shards;
    parts[s].insert(kv);
    weight_map[kv.first] = "model-0000" + std::to_string(s + 1) + "-of-0000" +
                           std::to_string(shards) + ".safetensors";
  }
  for (int s = 0; s < shards; ++s) {
    models::save_safetensors(
        dir + "/model-0000" + std::to_string(s + 1) + "-of-0000" +
            std::to_string(shards) + ".safetensors",
        parts[s]);
  }
  nlohmann::json index = {
      {"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_bytes(dir + "/model.safetensors.index.json", index.dump(2));
}

}  // namespace testing
}  // namespace frameshard
