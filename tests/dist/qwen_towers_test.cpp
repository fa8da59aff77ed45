// Qwen-VL-family vision towers (frameshard/models/qwen_vision.h) and the
// safetensors reader/writer they load through:
//   * safetensors: round trip of every supported dtype, a hand-written file,
//     sharded indexes, and clear errors for corrupt files;
//   * config.json parsing with Hugging Face's defaults, and its errors;
//   * per family: loading HF parameter names under "model.visual." or
//     "visual." (one file or sharded) reproduces the saved tower exactly;
//     dtype conversion; errors for missing / unexpected / mis-shaped /
//     wrongly typed tensors and bad files;
//   * per family, float64: frame independence (encoding (t, h, w) equals
//     encoding its t frames one at a time, 1e-12) and sharded vs replicated
//     parity through frameshard::encode over 2 and 3 ranks, outputs AND
//     every parameter gradient, with rank-specific losses on different row
//     subsets (a slice-only backward is shown to fail the bound), DeepStack
//     outputs travelling in the one fused gather;
//   * the core's cost presets against HF's default vision configs.
// Numerical parity with `transformers` itself is the Python fixture test's
// job (it runs `frameshard encode` on HF-saved tiny models).

#include <frameshard/models/qwen_vision.h>
#include <frameshard/models/safetensors.h>
#include <frameshard/runtime/encode.h>

#include "testing/run_ranks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace frameshard {
namespace models {

// Test names and failure messages print the family, not its bytes.
void PrintTo(QwenFamily family, std::ostream* os) {
  *os << to_string(family);
}

namespace {

using frameshard::testing::run_ranks;
using frameshard::testing::TemporaryDirectory;

// ------------------------------------------------------------ helpers

/// The message of what `fn` throws ("" when it does not throw).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_CONTAINS(stmt, text)                                      \
  do {                                                                         \
    const std::string msg_ = error_of([&] { stmt; });                          \
    EXPECT_NE(msg_.find(text), std::string::npos)                              \
        << "expected an error containing \"" << (text) << "\", got \"" << msg_ \
        << "\"";                                                               \
  } while (false)

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

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(
      std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// A safetensors file from a header text and a byte buffer, by hand.
std::string safetensors_bytes(const std::string& header, std::string data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + header + data;
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

/// Tiny towers (depth 2, width 32): in_features 3 * 2 * 2 * 2 = 24,
/// output width 24. Qwen2.5-VL: 4 x 4-patch windows, layer 1 full
/// attention; Qwen3-VL: a 4 x 4 position table, DeepStack after both layers.
QwenVisionConfig tiny_config(QwenFamily family) {
  QwenVisionConfig c;
  c.family = family;
  switch (family) {
    case QwenFamily::kQwen2VL: {
      c.model_type = "qwen2_vl";
      auto& v = c.qwen2_vl;
      v.depth = 2;
      v.embed_dim = 32;
      v.hidden_size = 24;
      v.mlp_ratio = 2;
      v.num_heads = 2;
      v.patch_size = 2;
      break;
    }
    case QwenFamily::kQwen2_5VL: {
      c.model_type = "qwen2_5_vl";
      auto& v = c.qwen2_5_vl;
      v.depth = 2;
      v.hidden_size = 32;
      v.intermediate_size = 48;
      v.num_heads = 2;
      v.patch_size = 2;
      v.window_size = 8;
      v.out_hidden_size = 24;
      v.fullatt_block_indexes = {1};
      break;
    }
    case QwenFamily::kQwen3VL: {
      c.model_type = "qwen3_vl";
      auto& v = c.qwen3_vl;
      v.depth = 2;
      v.hidden_size = 32;
      v.intermediate_size = 48;
      v.num_heads = 2;
      v.patch_size = 2;
      v.out_hidden_size = 24;
      v.num_position_embeddings = 16;
      v.deepstack_visual_indexes = {0, 1};
      break;
    }
  }
  return c;
}

/// A config.json as Hugging Face's save_pretrained writes it (vision part
/// complete, a token text part).
std::string config_json(const QwenVisionConfig& c) {
  nlohmann::json v;
  switch (c.family) {
    case QwenFamily::kQwen2VL: {
      const auto& x = c.qwen2_vl;
      v = {
          {"model_type", "qwen2_vl_vision"},
          {"depth", x.depth},
          {"embed_dim", x.embed_dim},
          {"hidden_size", x.hidden_size},
          {"hidden_act", x.hidden_act},
          {"mlp_ratio", x.mlp_ratio},
          {"num_heads", x.num_heads},
          {"in_channels", x.in_channels},
          {"patch_size", x.patch_size},
          {"spatial_merge_size", x.spatial_merge_size},
          {"temporal_patch_size", x.temporal_patch_size}};
      v["rope_parameters"] = {
          {"rope_theta", x.rope_theta}, {"rope_type", "axial"}};
      break;
    }
    case QwenFamily::kQwen2_5VL: {
      const auto& x = c.qwen2_5_vl;
      v = {
          {"model_type", "qwen2_5_vl_vision"},
          {"depth", x.depth},
          {"hidden_size", x.hidden_size},
          {"hidden_act", x.hidden_act},
          {"intermediate_size", x.intermediate_size},
          {"num_heads", x.num_heads},
          {"in_channels", x.in_channels},
          {"patch_size", x.patch_size},
          {"spatial_merge_size", x.spatial_merge_size},
          {"temporal_patch_size", x.temporal_patch_size},
          {"window_size", x.window_size},
          {"out_hidden_size", x.out_hidden_size},
          {"fullatt_block_indexes", x.fullatt_block_indexes},
          {"tokens_per_second", 4}};
      v["rope_parameters"] = {
          {"rope_theta", x.rope_theta}, {"rope_type", "axial"}};
      break;
    }
    case QwenFamily::kQwen3VL: {
      const auto& x = c.qwen3_vl;
      v = {
          {"model_type", "qwen3_vl_vision"},
          {"depth", x.depth},
          {"hidden_size", x.hidden_size},
          {"hidden_act", x.hidden_act},
          {"intermediate_size", x.intermediate_size},
          {"num_heads", x.num_heads},
          {"in_channels", x.in_channels},
          {"patch_size", x.patch_size},
          {"spatial_merge_size", x.spatial_merge_size},
          {"temporal_patch_size", x.temporal_patch_size},
          {"out_hidden_size", x.out_hidden_size},
          {"num_position_embeddings", x.num_position_embeddings},
          {"deepstack_visual_indexes", x.deepstack_visual_indexes}};
      v["rope_parameters"] = {
          {"rope_theta", x.rope_theta}, {"rope_type", "axial"}};
      break;
    }
  }
  v["initializer_range"] = 0.02;
  nlohmann::json j = {
      {"architectures", {"ForConditionalGeneration"}},
      {"model_type", c.model_type},
      {"text_config",
       {{"hidden_size", c.out_hidden_size()}, {"vocab_size", 16}}},
      {"vision_config", v},
      {"transformers_version", "5.0.0"}};
  return j.dump(2);
}

/// Every parameter random and O(1)-sensitive: norms around 1, weights
/// scaled by 1/sqrt(fan_in) so attention is far from uniform.
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
  QwenVisionModel m = make_qwen_vision(c);
  m.module->to(dtype);
  randomize(*m.module, seed);
  return m;
}

QwenVisionModel clone_model(const QwenVisionModel& src) {
  QwenVisionModel m = make_qwen_vision(src.config);
  const auto dtype = src.module->parameters()[0].scalar_type();
  m.module->to(dtype);
  torch::NoGradGuard no_grad;
  auto from = src.module->named_parameters();
  for (auto& item : m.module->named_parameters()) {
    item.value().copy_(from[item.key()]);
  }
  return m;
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

/// Writes config.json and the tower's tensors (plus a language-model
/// tensor the loader must ignore) as a Hugging Face model directory.
void write_model_dir(
    const std::string& dir,
    const QwenVisionModel& m,
    const std::string& prefix,
    int shards = 1) {
  write_bytes(dir + "/config.json", config_json(m.config));
  auto tensors = vision_state_dict(*m.module, prefix);
  tensors["model.language_model.embed_tokens.weight"] = at::ones({16, 4});
  if (shards == 1) {
    save_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
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
    save_safetensors(
        dir + "/model-0000" + std::to_string(s + 1) + "-of-0000" +
            std::to_string(shards) + ".safetensors",
        parts[s]);
  }
  nlohmann::json index = {
      {"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_bytes(dir + "/model.safetensors.index.json", index.dump(2));
}

// ------------------------------------------------------------ safetensors

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  TemporaryDirectory dir;
  const std::string path = dir.path() + "/t.safetensors";
  torch::manual_seed(0);
  std::map<std::string, at::Tensor> in = {
      {"f64", at::randn({2, 3}, at::kDouble)},
      {"f32", at::randn({4}, at::kFloat)},
      {"f16", at::randn({3, 1, 2}).to(at::kHalf)},
      {"bf16", at::randn({5}).to(at::kBFloat16)},
      {"i64", at::arange(-3, 9, at::kLong).reshape({3, 4})},
      {"i32", at::tensor({7, -2, 2147483647}, at::kInt)},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},
      {"empty", at::zeros({0, 3}, at::kFloat)},
      {"noncontig", at::randn({3, 4}).t()}};
  save_safetensors(path, in, {{"format", "pt"}, {"note", "x"}});

  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  }
  EXPECT_EQ(header_len % 8, 0u) << "header padded to 8 bytes";
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  EXPECT_EQ(header["f16"]["dtype"], "F16");
  EXPECT_EQ(header["bf16"]["dtype"], "BF16");
  EXPECT_EQ(header["__metadata__"]["note"], "x");

  std::map<std::string, std::string> meta;
  const auto out = load_safetensors(path, &meta);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("note"), "x");
  ASSERT_EQ(out.size(), in.size());
  for (const auto& kv : in) {
    const at::Tensor& got = out.at(kv.first);
    EXPECT_EQ(got.scalar_type(), kv.second.scalar_type()) << kv.first;
    EXPECT_EQ(got.sizes(), kv.second.sizes()) << kv.first;
    EXPECT_TRUE(at::equal(got, kv.second.contiguous())) << kv.first;
  }
  SafetensorsFile f(path);
  EXPECT_EQ(f.entry("f64").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.entry("f64").end - f.entry("f64").begin, 6 * 8);
  EXPECT_EQ(
      f.names(),
      (std::vector<std::string>{
          "bf16",
          "empty",
          "f16",
          "f32",
          "f64",
          "i32",
          "i64",
          "noncontig",
          "scalar"}));
}

TEST(Safetensors, ReadsAFileWrittenByHand) {
  // The format as specified, independent of our writer: two tensors, the
  // second first in the buffer, an unpadded header.
  TemporaryDirectory dir;
  const std::string path = dir.path() + "/h.safetensors";
  float a[2] = {1.5f, -2.0f};
  int64_t b[3] = {1, 2, 3};
  std::string data(sizeof(b) + sizeof(a), '\0');
  std::memcpy(&data[0], b, sizeof(b));
  std::memcpy(&data[sizeof(b)], a, sizeof(a));
  write_bytes(
      path,
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[2,1],"data_offsets":[24,32]},)"
          R"("b":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})",
          data));
  SafetensorsFile f(path);
  EXPECT_TRUE(
      at::equal(f.read("a"), at::tensor({1.5f, -2.0f}).reshape({2, 1})));
  EXPECT_TRUE(at::equal(f.read("b"), at::tensor({1, 2, 3}, at::kLong)));
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, RejectsCorruptFilesNamingTheProblem) {
  TemporaryDirectory dir;
  const std::string path = dir.path() + "/bad.safetensors";
  const std::string f32x2(8, '\0');
  auto open_bytes = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    SafetensorsFile f(path);
  };
  EXPECT_ERROR_CONTAINS(SafetensorsFile(dir.path() + "/none"), "no such file");
  EXPECT_ERROR_CONTAINS(open_bytes("abc"), "at least 8 bytes");
  EXPECT_ERROR_CONTAINS(
      open_bytes(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}"),
      "header length");
  EXPECT_ERROR_CONTAINS(open_bytes(safetensors_bytes("{nope", "")), "JSON");
  EXPECT_ERROR_CONTAINS(open_bytes(safetensors_bytes("[1]", "")), "object");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(
          R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", f32x2)),
      "\"Q7\"");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2)),
      "3 elements of F32");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", f32x2)),
      "(the byte buffer)");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          f32x2)),
      "without overlap or gap");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x2)),
      "truncated or trailing data");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2)),
      "non-negative integers");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(R"({"a":{"dtype":"F32"}})", "")),
      "\"data_offsets\"");
  EXPECT_ERROR_CONTAINS(
      open_bytes(safetensors_bytes(R"({"__metadata__":{"k":1}})", "")),
      "string values");
  // A dtype we do not read opens (a quantised language model may sit in the
  // same file) but cannot be read.
  write_bytes(
      path,
      safetensors_bytes(
          R"({"q":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", f32x2));
  SafetensorsFile f(path);
  EXPECT_EQ(f.entry("q").dtype, at::ScalarType::Undefined);
  EXPECT_ERROR_CONTAINS(f.read("q"), "got I8");
  EXPECT_ERROR_CONTAINS(f.read("zz"), "\"zz\"");
  EXPECT_ERROR_CONTAINS(
      save_safetensors(path, {{"b", at::ones({2}, at::kBool)}}), "got Bool");
}

TEST(Safetensors, ShardedCheckpointResolvesEveryName) {
  TemporaryDirectory dir;
  save_safetensors(dir.path() + "/s1.safetensors", {{"a", at::ones({2})}});
  save_safetensors(
      dir.path() + "/s2.safetensors",
      {{"b", at::zeros({3}, at::kDouble)}, {"c", at::ones({1}, at::kLong)}});
  write_bytes(
      dir.path() + "/model.safetensors.index.json",
      R"({"metadata":{},"weight_map":{"a":"s1.safetensors",)"
      R"("b":"s2.safetensors","c":"s2.safetensors"}})");
  const auto ck = SafetensorsCheckpoint::open(dir.path());
  EXPECT_TRUE(ck.sharded());
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(at::equal(ck.read("b"), at::zeros({3}, at::kDouble)));
  EXPECT_NE(ck.file_of("c").find("s2.safetensors"), std::string::npos);

  write_bytes(
      dir.path() + "/model.safetensors.index.json",
      R"({"weight_map":{"a":"s2.safetensors"}})");
  EXPECT_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(dir.path()), "got no such tensor there");
  write_bytes(
      dir.path() + "/model.safetensors.index.json",
      R"({"weight_map":{"a":"s9.safetensors"}})");
  EXPECT_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(dir.path()), "no such file");
  write_bytes(dir.path() + "/model.safetensors.index.json", R"({"x":1})");
  EXPECT_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(dir.path()), "\"weight_map\"");
  TemporaryDirectory empty;
  EXPECT_ERROR_CONTAINS(
      SafetensorsCheckpoint::open(empty.path()), "got neither");
}

// ------------------------------------------------------------ config

TEST(QwenConfig, RoundTripsEveryFamily) {
  for (auto family :
       {QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL}) {
    const QwenVisionConfig c = tiny_config(family);
    const QwenVisionConfig p = parse_qwen_vision_config(config_json(c));
    EXPECT_EQ(p.family, family);
    EXPECT_EQ(p.model_type, c.model_type);
    EXPECT_EQ(tower_dims(p).depth, tower_dims(c).depth);
    EXPECT_EQ(p.in_features(), 24);
    EXPECT_EQ(p.out_hidden_size(), 24);
    EXPECT_EQ(p.spatial_merge_size(), 2);
    EXPECT_EQ(p.temporal_patch_size(), 2);
  }
  const auto q2 =
      parse_qwen_vision_config(config_json(tiny_config(QwenFamily::kQwen2VL)));
  EXPECT_EQ(q2.qwen2_vl.embed_dim, 32);
  EXPECT_EQ(q2.qwen2_vl.intermediate_size(), 64);
  const auto q25 = parse_qwen_vision_config(
      config_json(tiny_config(QwenFamily::kQwen2_5VL)));
  EXPECT_EQ(q25.qwen2_5_vl.window_size, 8);
  EXPECT_EQ(q25.qwen2_5_vl.merger_window_size(), 2);
  EXPECT_EQ(q25.qwen2_5_vl.fullatt_block_indexes, std::vector<int64_t>{1});
  const auto q3 =
      parse_qwen_vision_config(config_json(tiny_config(QwenFamily::kQwen3VL)));
  EXPECT_EQ(q3.qwen3_vl.num_position_embeddings, 16);
  EXPECT_EQ(q3.qwen3_vl.num_grid_per_side(), 4);
  EXPECT_EQ(q3.qwen3_vl.deepstack_visual_indexes, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(
      q3.output_names(),
      (std::vector<std::string>{"embeddings", "deepstack_0", "deepstack_1"}));
}

TEST(QwenConfig, MissingFieldsTakeHuggingFaceDefaults) {
  const auto q2 = parse_qwen_vision_config(R"({"model_type":"qwen2_vl"})");
  EXPECT_EQ(q2.qwen2_vl.depth, 32);
  EXPECT_EQ(q2.qwen2_vl.embed_dim, 1280);
  EXPECT_EQ(q2.qwen2_vl.hidden_act, "quick_gelu");
  EXPECT_EQ(q2.qwen2_vl.rope_theta, 10000.0);
  const auto q25 = parse_qwen_vision_config(
      R"({"model_type":"qwen2_5_vl","vision_config":{"hidden_size":1280,)"
      R"("patch_size":[14,14],"rope_parameters":{"rope_theta":500.0}}})");
  EXPECT_EQ(q25.qwen2_5_vl.hidden_size, 1280);
  EXPECT_EQ(q25.qwen2_5_vl.patch_size, 14);
  EXPECT_EQ(q25.qwen2_5_vl.window_size, 112);
  EXPECT_EQ(q25.qwen2_5_vl.rope_theta, 500.0);
  EXPECT_EQ(
      q25.qwen2_5_vl.fullatt_block_indexes,
      (std::vector<int64_t>{7, 15, 23, 31}));
  const auto q3 = parse_qwen_vision_config(
      R"({"model_type":"qwen3_vl_moe","vision_config":{"depth":24}})");
  EXPECT_EQ(q3.family, QwenFamily::kQwen3VL);
  EXPECT_EQ(q3.qwen3_vl.depth, 24);
  EXPECT_EQ(
      q3.qwen3_vl.deepstack_visual_indexes, (std::vector<int64_t>{8, 16, 24}));
  // Qwen3.5: the Qwen3-VL tower without DeepStack (even if a field says so).
  const auto q35 = parse_qwen_vision_config(
      R"({"model_type":"qwen3_5_moe","vision_config":{"out_hidden_size":2048,)"
      R"("deepstack_visual_indexes":[1]}})");
  EXPECT_EQ(q35.family, QwenFamily::kQwen3VL);
  EXPECT_TRUE(q35.qwen3_vl.deepstack_visual_indexes.empty());
  EXPECT_EQ(q35.output_names(), std::vector<std::string>{"embeddings"});
  EXPECT_EQ(tower_dims(q35).name, "qwen3.5");
  // A bare vision config.
  const auto bare = parse_qwen_vision_config(
      R"({"model_type":"qwen3_vl_vision","depth":3,"hidden_size":64})");
  EXPECT_EQ(bare.qwen3_vl.depth, 3);
  EXPECT_EQ(bare.qwen3_vl.hidden_size, 64);
}

TEST(QwenConfig, RejectsBadConfigsNamingTheField) {
  auto parse = [](const std::string& s) {
    parse_qwen_vision_config(s, "my/config.json");
  };
  EXPECT_ERROR_CONTAINS(parse("{"), "JSON in my/config.json");
  EXPECT_ERROR_CONTAINS(parse(R"({"x":1})"), "model_type");
  EXPECT_ERROR_CONTAINS(parse(R"({"model_type":"llava"})"), "\"llava\"");
  EXPECT_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen2_vl","vision_config":[1]})"),
      "vision_config to be an object");
  EXPECT_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen2_vl","vision_config":{"depth":"2"}})"),
      "vision_config.depth to be an integer >= 1 in my/config.json, got \"2\"");
  EXPECT_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":{"depth":0}})"),
      "vision_config.depth");
  EXPECT_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":)"
            R"({"deepstack_visual_indexes":[1,-1]}})"),
      "deepstack_visual_indexes to be a list of non-negative integers");
  EXPECT_ERROR_CONTAINS(
      parse(
          R"({"model_type":"qwen3_vl","vision_config":{"patch_size":[2,3]}})"),
      "patch_size to be a positive integer or a list of equal ones");
  EXPECT_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":{"rope_parameters":)"
            R"({"rope_type":"yarn"}}})"),
      "rope_type \"axial\"");
  EXPECT_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":{"hidden_act":1}})"),
      "hidden_act to be a string");
  TemporaryDirectory dir;
  EXPECT_ERROR_CONTAINS(load_qwen_vision_config(dir.path()), "no such file");
}

TEST(QwenConfig, TowersRejectInvalidDimensions) {
  auto c2 = tiny_config(QwenFamily::kQwen2VL);
  c2.qwen2_vl.num_heads = 3;
  EXPECT_ERROR_CONTAINS(make_qwen_vision(c2), "num_heads");
  c2 = tiny_config(QwenFamily::kQwen2VL);
  c2.qwen2_vl.num_heads = 4;  // head dim 8: fine
  EXPECT_EQ(error_of([&] { make_qwen_vision(c2); }), "");
  c2.qwen2_vl.num_heads = 16;  // head dim 2: not divisible by 4
  EXPECT_ERROR_CONTAINS(make_qwen_vision(c2), "divisible by 4");
  c2 = tiny_config(QwenFamily::kQwen2VL);
  c2.qwen2_vl.hidden_act = "tanh";
  EXPECT_ERROR_CONTAINS(make_qwen_vision(c2), "\"tanh\"");
  auto c25 = tiny_config(QwenFamily::kQwen2_5VL);
  c25.qwen2_5_vl.window_size = 3;
  EXPECT_ERROR_CONTAINS(make_qwen_vision(c25), "window_size");
  c25 = tiny_config(QwenFamily::kQwen2_5VL);
  c25.qwen2_5_vl.fullatt_block_indexes = {2};
  EXPECT_ERROR_CONTAINS(make_qwen_vision(c25), "fullatt_block_indexes");
  auto c3 = tiny_config(QwenFamily::kQwen3VL);
  c3.qwen3_vl.deepstack_visual_indexes = {0, 0};
  EXPECT_ERROR_CONTAINS(make_qwen_vision(c3), "distinct deepstack");
}

// ------------------------------------------------------------ cost presets

void expect_same_dims(const TowerDims& got, const TowerDims& want) {
  EXPECT_EQ(got.depth, want.depth) << want.name;
  EXPECT_EQ(got.hidden, want.hidden) << want.name;
  EXPECT_EQ(got.intermediate, want.intermediate) << want.name;
  EXPECT_EQ(got.gated_mlp, want.gated_mlp) << want.name;
  EXPECT_EQ(got.window_patches, want.window_patches) << want.name;
  EXPECT_EQ(got.full_attention_layers, want.full_attention_layers) << want.name;
  EXPECT_DOUBLE_EQ(
      flop_cost_model(got).effective_alpha(),
      flop_cost_model(want).effective_alpha())
      << want.name;
}

TEST(QwenCostPresets, MatchHuggingFaceDefaultConfigs) {
  // HF class defaults (Qwen2-VL-7B/72B share the tower).
  expect_same_dims(tower_dims(Qwen2VLVisionConfig{}), tower_preset("qwen2-vl"));
  // Qwen2_5_VLVisionConfig's class default hidden_size is 3584; every
  // released checkpoint (3B/7B/32B/72B) sets 1280, which the preset uses.
  EXPECT_EQ(Qwen2_5VLVisionConfig{}.hidden_size, 3584);
  const auto q25 = parse_qwen_vision_config(
      R"({"model_type":"qwen2_5_vl","vision_config":{"hidden_size":1280}})");
  expect_same_dims(tower_dims(q25), tower_preset("qwen2.5-vl"));
  // Qwen3-VL 8B/32B/30B-A3B/235B: the class defaults.
  expect_same_dims(tower_dims(Qwen3VLVisionConfig{}), tower_preset("qwen3-vl"));
  EXPECT_DOUBLE_EQ(
      flop_cost_model(tower_dims(Qwen3VLVisionConfig{})).effective_alpha(),
      6608.0);
  // Qwen3-VL 2B/4B vision_config: depth 24, hidden 1024, MLP 4096.
  const auto small = parse_qwen_vision_config(
      R"({"model_type":"qwen3_vl","vision_config":{"depth":24,)"
      R"("hidden_size":1024,"intermediate_size":4096}})");
  expect_same_dims(tower_dims(small), tower_preset("qwen3-vl-small"));
  // Qwen3.5: Qwen3_5VisionConfig's defaults.
  const auto q35 = parse_qwen_vision_config(R"({"model_type":"qwen3_5"})");
  expect_same_dims(tower_dims(q35), tower_preset("qwen3.5"));
  // A loaded tiny model yields its own cost model.
  const auto tiny = tower_dims(tiny_config(QwenFamily::kQwen2_5VL));
  EXPECT_EQ(tiny.window_patches, 16);  // 4 x 4 patches
  EXPECT_EQ(tiny.full_attention_layers, std::vector<int64_t>{1});
  EXPECT_GT(flop_cost_model(tiny)(64), flop_cost_model(tiny)(16));
}

// ------------------------------------------------------------ per family

class QwenFamilyTest : public ::testing::TestWithParam<QwenFamily> {};

std::string family_name(const ::testing::TestParamInfo<QwenFamily>& info) {
  switch (info.param) {
    case QwenFamily::kQwen2VL:
      return "Qwen2VL";
    case QwenFamily::kQwen2_5VL:
      return "Qwen2_5VL";
    case QwenFamily::kQwen3VL:
      return "Qwen3VL";
  }
  return "unknown";
}

// Images mixed with videos; 6 x 10 frames give Qwen2.5-VL partial windows.
const std::vector<GridThw> kMixed = {
    {1, 4, 6}, {2, 6, 4}, {1, 2, 2}, {3, 4, 4}, {1, 6, 10}};

TEST_P(QwenFamilyTest, LoadsHuggingFaceNamesFromEitherPrefixAndShards) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel src = random_model(cfg, at::kFloat, 1);
  torch::manual_seed(2);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kFloat);
  const auto want = run_tower(src, pixels, kMixed);
  ASSERT_EQ(want.size(), cfg.output_names().size());
  for (const auto& prefix : {"model.visual.", "visual."}) {
    for (int shards : {1, 3}) {
      TemporaryDirectory dir;
      write_model_dir(dir.path(), src, prefix, shards);
      const QwenVisionModel m = load_qwen_vision(dir.path());
      EXPECT_EQ(m.weight_prefix, prefix);
      EXPECT_EQ(m.weight_files.size(), static_cast<size_t>(shards));
      EXPECT_EQ(
          m.tensors_loaded,
          static_cast<int64_t>(src.module->parameters().size()));
      EXPECT_EQ(m.tensors_ignored, 1) << "the language-model tensor";
      const auto got = run_tower(m, pixels, kMixed);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_TRUE(at::equal(got[k], want[k]))
            << prefix << " shards " << shards << " output " << k;
      }
    }
  }
  // A fresh random tower is different (the comparison above can fail).
  const auto other =
      run_tower(random_model(cfg, at::kFloat, 9), pixels, kMixed);
  EXPECT_GT(max_abs_diff(other[0], want[0]), 1e-2);
}

TEST_P(QwenFamilyTest, ConvertsWeightsToTheRequestedDtype) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel src = random_model(cfg, at::kFloat, 3);
  TemporaryDirectory dir;
  write_model_dir(dir.path(), src, "model.visual.");
  auto want = src.module->named_parameters();
  for (auto dtype : {at::kBFloat16, at::kHalf, at::kDouble}) {
    QwenLoadOptions o;
    o.dtype = dtype;
    const QwenVisionModel m = load_qwen_vision(dir.path(), o);
    for (const auto& item : m.module->named_parameters()) {
      EXPECT_EQ(item.value().scalar_type(), dtype) << item.key();
      EXPECT_TRUE(at::equal(item.value(), want[item.key()].to(dtype)))
          << item.key();
    }
  }
  // A bfloat16 tower runs and stays close to float32 (bf16 rounding).
  torch::manual_seed(4);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kFloat);
  QwenLoadOptions o;
  o.dtype = at::kBFloat16;
  const auto bf = run_tower(load_qwen_vision(dir.path(), o), pixels, kMixed);
  const auto f32 = run_tower(src, pixels, kMixed);
  for (size_t k = 0; k < bf.size(); ++k) {
    EXPECT_EQ(bf[k].scalar_type(), at::kBFloat16);
    const double scale = f32[k].abs().max().item<double>();
    EXPECT_LE(max_abs_diff(bf[k], f32[k]), 0.1 * std::max(1.0, scale));
  }
  o.dtype = at::kInt;
  EXPECT_ERROR_CONTAINS(load_qwen_vision(dir.path(), o), "expected dtype");
}

TEST_P(QwenFamilyTest, LoaderListsMissingUnexpectedMisshapedAndBadTensors) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel src = random_model(cfg, at::kFloat, 5);
  const std::string p = "model.visual.";
  auto with =
      [&](const std::function<void(std::map<std::string, at::Tensor>&)>& edit) {
        TemporaryDirectory dir;
        write_bytes(dir.path() + "/config.json", config_json(cfg));
        auto t = vision_state_dict(*src.module, p);
        edit(t);
        save_safetensors(dir.path() + "/model.safetensors", t);
        return error_of([&] { load_qwen_vision(dir.path()); });
      };
  std::string msg = with([&](auto& t) {
    t.erase(p + "merger.linear_fc2.bias");
    t.erase(p + "merger.mlp.2.bias");
  });
  EXPECT_NE(msg.find("1 missing: model.visual.merger."), std::string::npos)
      << msg;
  msg = with([&](auto& t) { t[p + "blocks.0.attn.extra"] = at::ones({2}); });
  EXPECT_NE(
      msg.find("1 unexpected: model.visual.blocks.0.attn.extra"),
      std::string::npos)
      << msg;
  const std::string qkv = p + "blocks.1.attn.qkv.weight";
  msg = with([&](auto& t) { t[qkv] = at::zeros({3, 5}); });
  EXPECT_NE(
      msg.find("1 mis-shaped: " + qkv + " (expected [96, 32], got [3, 5])"),
      std::string::npos)
      << msg;
  msg = with([&](auto& t) {
    t[p + "blocks.0.attn.qkv.bias"] = at::zeros({96}, at::kLong);
  });
  EXPECT_NE(msg.find("not F64/F32/F16/BF16"), std::string::npos) << msg;
  // Several problems are reported together.
  msg = with([&](auto& t) {
    t.erase(qkv);
    t[p + "zzz"] = at::ones({1});
  });
  EXPECT_NE(msg.find("1 missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 unexpected"), std::string::npos) << msg;
  // Prefixes.
  msg = with(
      [&](auto& t) { t["visual.blocks.0.attn.qkv.bias"] = at::ones({1}); });
  EXPECT_NE(msg.find("got both"), std::string::npos) << msg;
  msg = with([&](auto& t) {
    std::map<std::string, at::Tensor> lm;
    lm["model.language_model.norm.weight"] = at::ones({2});
    t = lm;
  });
  EXPECT_NE(msg.find("got none among its 1 tensors"), std::string::npos) << msg;
  // A file that is not safetensors.
  {
    TemporaryDirectory dir;
    write_bytes(dir.path() + "/config.json", config_json(cfg));
    write_bytes(dir.path() + "/model.safetensors", "not a safetensors file");
    EXPECT_ERROR_CONTAINS(load_qwen_vision(dir.path()), "header length");
    std::remove((dir.path() + "/model.safetensors").c_str());
    EXPECT_ERROR_CONTAINS(load_qwen_vision(dir.path()), "got neither");
  }
}

TEST_P(QwenFamilyTest, ValidatesTowerInput) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kFloat, 6);
  const std::vector<GridThw> grid = {{2, 4, 4}};
  TowerInput in;
  in.pixel_values = at::randn({32, 24});
  in.grid_thw = grid_tensor(grid);
  in.cu_seqlens = cu_tensor(grid);
  EXPECT_EQ(m.tower(in)[0].size(0), 8);
  in.cu_seqlens = at::tensor({0, 32}, at::kInt);  // one segment: 2 frames
  EXPECT_ERROR_CONTAINS(m.tower(in), "cu_seqlens");
  in.cu_seqlens = at::Tensor();  // derived from grid_thw
  EXPECT_EQ(m.tower(in)[0].size(0), 8);
  in.pixel_values = at::randn({32, 23});
  EXPECT_ERROR_CONTAINS(m.tower(in), "pixel_values [rows, 24]");
  in.pixel_values = at::randn({31, 24});
  EXPECT_ERROR_CONTAINS(m.tower(in), "expected 32 pixel rows");
  in.pixel_values = at::randn({24, 24});
  in.grid_thw = grid_tensor({{2, 3, 4}});
  EXPECT_ERROR_CONTAINS(m.tower(in), "divisible by spatial_merge_size 2");
}

TEST_P(QwenFamilyTest, FramesAreIndependentFloat64) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kDouble, 7);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  const auto whole = run_tower(m, pixels, kMixed);
  // Every frame (1, h, w) on its own, concatenated in order.
  std::vector<std::vector<at::Tensor>> parts(whole.size());
  int64_t row = 0;
  for (const auto& g : kMixed) {
    for (int64_t t = 0; t < g.t; ++t) {
      const GridThw frame{1, g.h, g.w};
      const auto out = run_tower(m, pixels.narrow(0, row, g.h * g.w), {frame});
      for (size_t k = 0; k < out.size(); ++k) {
        parts[k].push_back(out[k]);
      }
      row += g.h * g.w;
    }
  }
  for (size_t k = 0; k < whole.size(); ++k) {
    const at::Tensor framewise = at::cat(parts[k], 0);
    ASSERT_EQ(framewise.sizes(), whole[k].sizes());
    const double d = max_abs_diff(framewise, whole[k]);
    RecordProperty("output" + std::to_string(k), sci(d));
    EXPECT_LE(d, 1e-12) << "output " << k;
  }
  // The frames of a video differ (their pixels do), so the check is real,
  // and so do identical frames at different sizes.
  const int64_t video_tokens = 6 * 4 / 4;  // tokens of one (1, 6, 4) frame
  const int64_t v0 = 6;                    // after the (1, 4, 6) image
  EXPECT_GT(
      max_abs_diff(
          whole[0].narrow(0, v0, video_tokens),
          whole[0].narrow(0, v0 + video_tokens, video_tokens)),
      1e-3);
}

struct ParityResult {
  double out_diff = 0.0;
  double grad_diff = 0.0;
  double grad_scale = 0.0;
  double slice_only_diff = 0.0;
  bool sharded = false;
  std::vector<int> alltoalls_forward;
  std::vector<int64_t> rows_seen;
};

// Sharded (frameshard::encode over `world` ranks) vs replicated (the tower
// on everything), float64: outputs on every rank and parameter gradients
// summed over ranks. Rank r's loss: rows i % world == r of every output
// with rank-specific random weights (a sequence shard, as under CP).
ParityResult sharded_parity(
    const QwenVisionConfig& cfg,
    const std::vector<GridThw>& grid,
    int world,
    uint64_t seed) {
  const QwenVisionModel ref = random_model(cfg, at::kDouble, seed);
  torch::manual_seed(seed + 100);
  const at::Tensor pixels = random_pixels(cfg, grid, at::kDouble);
  const auto ref_outs = run_tower(ref, pixels, grid);
  const int64_t total = ref_outs[0].size(0);
  const double wscale = 1.0 / std::sqrt(static_cast<double>(total));
  std::vector<std::vector<at::Tensor>> weights(world);
  std::vector<at::Tensor> masks;
  for (int r = 0; r < world; ++r) {
    for (const auto& o : ref_outs) {
      weights[r].push_back(at::randn(o.sizes(), at::kDouble) * wscale);
    }
    at::Tensor mask = at::zeros({total, 1}, at::kDouble);
    for (int64_t i = r; i < total; i += world) {
      mask[i] = 1.0;
    }
    masks.push_back(mask);
  }
  auto rank_loss =
      [&](int r, const std::vector<at::Tensor>& outs, const at::Tensor& extra) {
        at::Tensor loss = at::zeros({}, at::kDouble);
        for (size_t k = 0; k < outs.size(); ++k) {
          at::Tensor m = extra.defined() ? masks[r] * extra : masks[r];
          loss = loss + (outs[k] * weights[r][k] * m).sum();
        }
        return loss;
      };
  auto grads_of = [](const QwenVisionModel& m) {
    std::map<std::string, at::Tensor> g;
    for (const auto& item : m.module->named_parameters()) {
      const at::Tensor& p = item.value();
      g[item.key()] = p.grad().defined() ? p.grad().clone() : at::zeros_like(p);
    }
    return g;
  };
  {
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      loss = loss + rank_loss(r, ref_outs, at::Tensor());
    }
    loss.backward();
  }
  const auto ref_grads = grads_of(ref);

  ParityResult res;
  res.alltoalls_forward.assign(world, -1);
  res.rows_seen.assign(world, 0);
  std::vector<QwenVisionModel> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(clone_model(ref));
  }
  std::vector<double> out_diffs(world, 0.0);
  std::vector<std::map<std::string, at::Tensor>> rank_grads(world);
  std::vector<ShardPlan> plans(world);
  const at::Tensor grid_t = grid_tensor(grid);
  run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
    EncodeOptions eo;
    eo.plan.world = world;
    eo.plan.layout = media_layout(cfg);
    eo.plan.cost = flop_cost_model(tower_dims(cfg));
    eo.plan.policy.enabled = true;
    eo.plan.policy.min_tokens = 0;
    eo.plan.policy.min_frames = 0;
    const VisionTower& inner = models[rank].tower;
    VisionTower tower = [&, rank](const TowerInput& in) {
      res.rows_seen[rank] = in.pixel_values.size(0);
      return inner(in);
    };
    EncodeResult er = encode(tower, pixels, grid_t, counting, eo);
    res.alltoalls_forward[rank] = counting->alltoalls;
    TORCH_CHECK(er.outputs.size() == ref_outs.size(), "output count");
    for (size_t k = 0; k < er.outputs.size(); ++k) {
      TORCH_CHECK(er.outputs[k].sizes() == ref_outs[k].sizes(), "shape");
      out_diffs[rank] =
          std::max(out_diffs[rank], max_abs_diff(er.outputs[k], ref_outs[k]));
    }
    rank_loss(rank, er.outputs, at::Tensor()).backward();
    rank_grads[rank] = grads_of(models[rank]);
    plans[rank] = er.plan;
  });
  res.sharded = plans[0].sharded();
  res.out_diff = *std::max_element(out_diffs.begin(), out_diffs.end());
  for (const auto& kv : ref_grads) {
    at::Tensor sum = at::zeros_like(kv.second);
    for (int r = 0; r < world; ++r) {
      sum += rank_grads[r].at(kv.first);
    }
    res.grad_diff = std::max(res.grad_diff, max_abs_diff(sum, kv.second));
    res.grad_scale =
        std::max(res.grad_scale, kv.second.abs().max().item<double>());
  }
  // What a slice-only backward would give: each rank's tower sees only its
  // own loss's gradient on the rows it computed.
  if (res.sharded) {
    const QwenVisionModel so = clone_model(ref);
    const auto outs = run_tower(so, pixels, grid);
    const ShardPlan& plan = plans[0];
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      at::Tensor own = at::zeros({total, 1}, at::kDouble);
      for (size_t u = 0; u < plan.frames.units.size(); ++u) {
        if (plan.partition.assignment[u] == r) {
          const auto& unit = plan.frames.units[u];
          own.narrow(0, unit.token_offset, unit.tokens).fill_(1.0);
        }
      }
      loss = loss + rank_loss(r, outs, own);
    }
    loss.backward();
    for (const auto& kv : grads_of(so)) {
      res.slice_only_diff = std::max(
          res.slice_only_diff, max_abs_diff(kv.second, ref_grads.at(kv.first)));
    }
  }
  return res;
}

TEST_P(QwenFamilyTest, ShardedMatchesReplicatedFloat64) {
  const auto cfg = tiny_config(GetParam());
  for (int world : {2, 3}) {
    const auto r = sharded_parity(cfg, kMixed, world, 20 + world);
    ASSERT_TRUE(r.sharded);
    // Gradients are O(1) (loss weights scaled by 1/sqrt(tokens)); the bound
    // is relative to their scale.
    const double tol = 1e-12 * std::max(1.0, r.grad_scale);
    RecordProperty(
        "world" + std::to_string(world),
        "out " + sci(r.out_diff) + " grad " + sci(r.grad_diff) + " scale " +
            sci(r.grad_scale) + " slice_only " + sci(r.slice_only_diff));
    EXPECT_LE(r.out_diff, 1e-12) << "world " << world;
    EXPECT_LE(r.grad_diff, tol) << "world " << world;
    EXPECT_GT(r.slice_only_diff, 1e-3) << "the losses must discriminate";
    int64_t seen = 0;
    for (int rank = 0; rank < world; ++rank) {
      // Every output (DeepStack included) travels in ONE forward gather.
      EXPECT_EQ(r.alltoalls_forward[rank], 1) << "rank " << rank;
      EXPECT_GT(r.rows_seen[rank], 0);
      seen += r.rows_seen[rank];
    }
    EXPECT_GE(seen, patch_rows(kMixed)) << "every frame encoded somewhere";
  }
}

TEST_P(QwenFamilyTest, FewerFramesThanRanksUseDummyFrames) {
  const auto cfg = tiny_config(GetParam());
  const auto r = sharded_parity(cfg, {{1, 4, 4}, {1, 2, 2}}, 3, 30);
  ASSERT_TRUE(r.sharded);
  EXPECT_LE(r.out_diff, 1e-12);
  EXPECT_LE(r.grad_diff, 1e-12 * std::max(1.0, r.grad_scale));
  EXPECT_EQ(r.rows_seen[2], 4) << "one (1, 2, 2) dummy frame";
}

INSTANTIATE_TEST_SUITE_P(
    Families,
    QwenFamilyTest,
    ::testing::Values(
        QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL),
    family_name);

// ------------------------------------------------------------ family specifics

TEST(Qwen3VLTower, DeepstackOutputsFollowLayerOrder) {
  // HF appends DeepStack features while walking the layers, using merger
  // deepstack_visual_indexes.index(layer): with indexes [1, 0] the first
  // output comes from layer 0 through deepstack_merger_list.1.
  auto cfg = tiny_config(QwenFamily::kQwen3VL);
  const QwenVisionModel a = random_model(cfg, at::kDouble, 11);
  cfg.qwen3_vl.deepstack_visual_indexes = {1, 0};
  QwenVisionModel b = make_qwen_vision(cfg);
  b.module->to(at::kDouble);
  {
    torch::NoGradGuard no_grad;
    auto from = a.module->named_parameters();
    for (auto& item : b.module->named_parameters()) {
      std::string key = item.key();
      const std::string l0 = "deepstack_merger_list.0.";
      const std::string l1 = "deepstack_merger_list.1.";
      if (key.rfind(l0, 0) == 0) {
        key = l1 + key.substr(l0.size());
      } else if (key.rfind(l1, 0) == 0) {
        key = l0 + key.substr(l1.size());
      }
      item.value().copy_(from[key]);
    }
  }
  torch::manual_seed(12);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  const auto oa = run_tower(a, pixels, kMixed);
  const auto ob = run_tower(b, pixels, kMixed);
  ASSERT_EQ(oa.size(), 3u);
  ASSERT_EQ(ob.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_TRUE(at::equal(oa[k], ob[k])) << "output " << k;
  }
  EXPECT_GT(max_abs_diff(oa[1], oa[2]), 1e-3);
}

TEST(Qwen3VLTower, Qwen35HasNoDeepstackOutputs) {
  auto cfg = tiny_config(QwenFamily::kQwen3VL);
  cfg.model_type = "qwen3_5";
  cfg.qwen3_vl.deepstack_visual_indexes.clear();
  const QwenVisionModel m = random_model(cfg, at::kFloat, 13);
  for (const auto& item : m.module->named_parameters()) {
    EXPECT_EQ(item.key().find("deepstack"), std::string::npos);
  }
  torch::manual_seed(14);
  const auto out = run_tower(m, random_pixels(cfg, kMixed, at::kFloat), kMixed);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].size(0), patch_rows(kMixed) / 4);
  EXPECT_EQ(out[0].size(1), 24);
}

TEST(Qwen2_5VLTower, WindowLayersDifferFromFullAttention) {
  // The same weights with every layer full-attention give other outputs:
  // windows are in effect (and frames larger than one window exist).
  auto cfg = tiny_config(QwenFamily::kQwen2_5VL);
  const QwenVisionModel win = random_model(cfg, at::kDouble, 15);
  cfg.qwen2_5_vl.fullatt_block_indexes = {0, 1};
  QwenVisionModel full = make_qwen_vision(cfg);
  full.module->to(at::kDouble);
  {
    torch::NoGradGuard no_grad;
    auto from = win.module->named_parameters();
    for (auto& item : full.module->named_parameters()) {
      item.value().copy_(from[item.key()]);
    }
  }
  torch::manual_seed(16);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  EXPECT_GT(
      max_abs_diff(
          run_tower(win, pixels, kMixed)[0],
          run_tower(full, pixels, kMixed)[0]),
      1e-3);
  // A frame that fits in one window is the same either way.
  const std::vector<GridThw> small = {{1, 4, 4}};
  const at::Tensor p = pixels.narrow(0, 0, 16);
  EXPECT_LE(
      max_abs_diff(run_tower(win, p, small)[0], run_tower(full, p, small)[0]),
      1e-12);
}

}  // namespace
}  // namespace models
}  // namespace frameshard
