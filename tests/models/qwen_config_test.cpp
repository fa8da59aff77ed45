// Qwen vision configs: config.json parsing with Hugging Face's defaults and
// its errors, the writer driven by the same field tables (every field of
// every model type round-trips), the variant's accessors, towers refusing
// invalid dimensions, and the core's cost presets against HF's default
// vision configs (frameshard/models/{qwen_config,hf_config,cost_bridge}.h).

#include <frameshard/models/qwen_vision.h>

#include "testing/qwen_fixtures.h"
#include "testing/scratch_dir.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using testing::hf_config_json;
using testing::ScratchDir;
using testing::tiny_config;
using testing::torch_error_of;

// ------------------------------------------------------------ config

TEST(QwenConfig, RoundTripsEveryFamily) {
  for (auto family :
       {QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL}) {
    const QwenVisionConfig c = tiny_config(family);
    const QwenVisionConfig p = parse_qwen_vision_config(hf_config_json(c));
    EXPECT_EQ(p.family(), family);
    EXPECT_EQ(p.model_type, c.model_type);
    EXPECT_EQ(tower_dims(p).depth, tower_dims(c).depth);
    EXPECT_EQ(p.in_features(), 24);
    EXPECT_EQ(p.out_hidden_size(), 24);
    EXPECT_EQ(p.spatial_merge_size(), 2);
    EXPECT_EQ(p.temporal_patch_size(), 2);
  }
  const auto q2 = parse_qwen_vision_config(
      hf_config_json(tiny_config(QwenFamily::kQwen2VL)));
  EXPECT_EQ(q2.as<Qwen2VLVisionConfig>().embed_dim, 32);
  EXPECT_EQ(q2.as<Qwen2VLVisionConfig>().intermediate_size(), 64);
  const auto q25 = parse_qwen_vision_config(
      hf_config_json(tiny_config(QwenFamily::kQwen2_5VL)));
  EXPECT_EQ(q25.as<Qwen2_5VLVisionConfig>().window_size, 8);
  EXPECT_EQ(q25.as<Qwen2_5VLVisionConfig>().merger_window_size(), 2);
  EXPECT_EQ(
      q25.as<Qwen2_5VLVisionConfig>().fullatt_block_indexes,
      std::vector<int64_t>{1});
  const auto q3 = parse_qwen_vision_config(
      hf_config_json(tiny_config(QwenFamily::kQwen3VL)));
  EXPECT_EQ(q3.as<Qwen3VLVisionConfig>().num_position_embeddings, 16);
  EXPECT_EQ(q3.as<Qwen3VLVisionConfig>().num_grid_per_side(), 4);
  EXPECT_EQ(
      q3.as<Qwen3VLVisionConfig>().deepstack_visual_indexes,
      (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(
      q3.output_names(),
      (std::vector<std::string>{"embeddings", "deepstack_0", "deepstack_1"}));
}

TEST(QwenConfig, MissingFieldsTakeHuggingFaceDefaults) {
  const auto q2 = parse_qwen_vision_config(R"({"model_type":"qwen2_vl"})");
  EXPECT_EQ(q2.as<Qwen2VLVisionConfig>().depth, 32);
  EXPECT_EQ(q2.as<Qwen2VLVisionConfig>().embed_dim, 1280);
  EXPECT_EQ(q2.as<Qwen2VLVisionConfig>().hidden_act, "quick_gelu");
  EXPECT_EQ(q2.as<Qwen2VLVisionConfig>().rope_theta, 10000.0);
  const auto q25 = parse_qwen_vision_config(
      R"({"model_type":"qwen2_5_vl","vision_config":{"hidden_size":1280,)"
      R"("patch_size":[14,14],"rope_parameters":{"rope_theta":500.0}}})");
  EXPECT_EQ(q25.as<Qwen2_5VLVisionConfig>().hidden_size, 1280);
  EXPECT_EQ(q25.as<Qwen2_5VLVisionConfig>().patch_size, 14);
  EXPECT_EQ(q25.as<Qwen2_5VLVisionConfig>().window_size, 112);
  EXPECT_EQ(q25.as<Qwen2_5VLVisionConfig>().rope_theta, 500.0);
  EXPECT_EQ(
      q25.as<Qwen2_5VLVisionConfig>().fullatt_block_indexes,
      (std::vector<int64_t>{7, 15, 23, 31}));
  const auto q3 = parse_qwen_vision_config(
      R"({"model_type":"qwen3_vl_moe","vision_config":{"depth":24}})");
  EXPECT_EQ(q3.family(), QwenFamily::kQwen3VL);
  EXPECT_EQ(q3.as<Qwen3VLVisionConfig>().depth, 24);
  EXPECT_EQ(
      q3.as<Qwen3VLVisionConfig>().deepstack_visual_indexes,
      (std::vector<int64_t>{8, 16, 24}));
  // Qwen3.5: the Qwen3-VL tower without DeepStack (even if a field says so).
  const auto q35 = parse_qwen_vision_config(
      R"({"model_type":"qwen3_5_moe","vision_config":{"out_hidden_size":2048,)"
      R"("deepstack_visual_indexes":[1]}})");
  EXPECT_EQ(q35.family(), QwenFamily::kQwen3VL);
  EXPECT_TRUE(q35.as<Qwen3VLVisionConfig>().deepstack_visual_indexes.empty());
  EXPECT_EQ(q35.output_names(), std::vector<std::string>{"embeddings"});
  EXPECT_EQ(tower_dims(q35).name, "qwen3.5");
  // A bare vision config.
  const auto bare = parse_qwen_vision_config(
      R"({"model_type":"qwen3_vl_vision","depth":3,"hidden_size":64})");
  EXPECT_EQ(bare.as<Qwen3VLVisionConfig>().depth, 3);
  EXPECT_EQ(bare.as<Qwen3VLVisionConfig>().hidden_size, 64);
}

TEST(QwenConfig, RejectsBadConfigsNamingTheField) {
  auto parse = [](const std::string& s) {
    parse_qwen_vision_config(s, "my/config.json");
  };
  EXPECT_TORCH_ERROR_CONTAINS(parse("{"), "JSON in my/config.json");
  EXPECT_TORCH_ERROR_CONTAINS(parse(R"({"x":1})"), "model_type");
  EXPECT_TORCH_ERROR_CONTAINS(parse(R"({"model_type":"llava"})"), "\"llava\"");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen2_vl","vision_config":[1]})"),
      "vision_config to be an object");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen2_vl","vision_config":{"depth":"2"}})"),
      "vision_config.depth to be an integer in [1, 256] in my/config.json, got "
      "\"2\"");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":{"depth":0}})"),
      "vision_config.depth");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":)"
            R"({"deepstack_visual_indexes":[1,-1]}})"),
      "deepstack_visual_indexes to be a list of non-negative integers");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(
          R"({"model_type":"qwen3_vl","vision_config":{"patch_size":[2,3]}})"),
      "patch_size to be an integer in [1, 65536] or a list of equal ones");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":{"rope_parameters":)"
            R"({"rope_type":"yarn"}}})"),
      "rope_type \"axial\"");
  EXPECT_TORCH_ERROR_CONTAINS(
      parse(R"({"model_type":"qwen3_vl","vision_config":{"hidden_act":1}})"),
      "hidden_act to be a string");
  ScratchDir dir;
  EXPECT_TORCH_ERROR_CONTAINS(
      load_qwen_vision_config(dir.path()), "no such file");
}

TEST(QwenConfig, TowersRejectInvalidDimensions) {
  auto c2 = tiny_config(QwenFamily::kQwen2VL);
  c2.as<Qwen2VLVisionConfig>().num_heads = 3;
  EXPECT_TORCH_ERROR_CONTAINS(make_qwen_vision(c2), "num_heads");
  c2 = tiny_config(QwenFamily::kQwen2VL);
  c2.as<Qwen2VLVisionConfig>().num_heads = 4;  // head dim 8: fine
  EXPECT_EQ(torch_error_of([&] { make_qwen_vision(c2); }), "");
  c2.as<Qwen2VLVisionConfig>().num_heads =
      16;  // head dim 2: not divisible by 4
  EXPECT_TORCH_ERROR_CONTAINS(make_qwen_vision(c2), "divisible by 4");
  c2 = tiny_config(QwenFamily::kQwen2VL);
  c2.as<Qwen2VLVisionConfig>().hidden_act = "tanh";
  EXPECT_TORCH_ERROR_CONTAINS(make_qwen_vision(c2), "\"tanh\"");
  auto c25 = tiny_config(QwenFamily::kQwen2_5VL);
  c25.as<Qwen2_5VLVisionConfig>().window_size = 3;
  EXPECT_TORCH_ERROR_CONTAINS(make_qwen_vision(c25), "window_size");
  c25 = tiny_config(QwenFamily::kQwen2_5VL);
  c25.as<Qwen2_5VLVisionConfig>().fullatt_block_indexes = {2};
  EXPECT_TORCH_ERROR_CONTAINS(make_qwen_vision(c25), "fullatt_block_indexes");
  auto c3 = tiny_config(QwenFamily::kQwen3VL);
  c3.as<Qwen3VLVisionConfig>().deepstack_visual_indexes = {0, 0};
  EXPECT_TORCH_ERROR_CONTAINS(make_qwen_vision(c3), "distinct deepstack");
}

// ------------------------------------------------------------ cost presets

void expect_same_dims(const TowerDims& got, const TowerDims& want) {
  EXPECT_EQ(got.depth, want.depth) << want.name;
  EXPECT_EQ(got.hidden, want.hidden) << want.name;
  EXPECT_EQ(got.intermediate, want.intermediate) << want.name;
  EXPECT_EQ(got.gated_mlp, want.gated_mlp) << want.name;
  EXPECT_EQ(got.window_patches, want.window_patches) << want.name;
  EXPECT_EQ(got.full_attention_layers, want.full_attention_layers) << want.name;
  EXPECT_EQ(got.mergers, want.mergers) << want.name;
  EXPECT_EQ(got.merge_size, want.merge_size) << want.name;
  EXPECT_EQ(got.out_hidden, want.out_hidden) << want.name;
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
  // 27 blocks of 2 * 1152 + 4304, the merger and 3 DeepStack mergers of
  // (1152 * 4 + 3584) / 2 each, over 27 full-attention layers.
  EXPECT_DOUBLE_EQ(
      flop_cost_model(tower_dims(Qwen3VLVisionConfig{})).effective_alpha(),
      (27.0 * 6608 + 4.0 * 4096) / 27);
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
  EXPECT_EQ(tiny.mergers, 1);
  const auto tiny3 = tower_dims(tiny_config(QwenFamily::kQwen3VL));
  EXPECT_EQ(
      tiny3.mergers,
      1 + static_cast<int64_t>(tiny_config(QwenFamily::kQwen3VL)
                                   .as<Qwen3VLVisionConfig>()
                                   .deepstack_visual_indexes.size()));
  EXPECT_GT(flop_cost_model(tiny)(64), flop_cost_model(tiny)(16));
}

// ------------------------------------------------------------ writer

// Every field away from HF's default, so a field the writer dropped would
// read back as the default and fail the comparison.
Qwen2VLVisionConfig every_field_qwen2() {
  Qwen2VLVisionConfig c;
  c.depth = 3;
  c.embed_dim = 40;
  c.hidden_size = 20;
  c.hidden_act = "gelu";
  c.mlp_ratio = 2.5;
  c.num_heads = 5;
  c.in_channels = 1;
  c.patch_size = 7;
  c.spatial_merge_size = 3;
  c.temporal_patch_size = 1;
  c.rope_theta = 500.5;
  return c;
}

Qwen2_5VLVisionConfig every_field_qwen2_5() {
  Qwen2_5VLVisionConfig c;
  c.depth = 4;
  c.hidden_size = 48;
  c.hidden_act = "gelu";
  c.intermediate_size = 50;
  c.num_heads = 3;
  c.in_channels = 2;
  c.patch_size = 4;
  c.spatial_merge_size = 3;
  c.temporal_patch_size = 1;
  c.window_size = 24;
  c.out_hidden_size = 30;
  c.fullatt_block_indexes = {0, 3};
  c.rope_theta = 123.25;
  return c;
}

Qwen3VLVisionConfig every_field_qwen3() {
  Qwen3VLVisionConfig c;
  c.depth = 5;
  c.hidden_size = 64;
  c.hidden_act = "silu";
  c.intermediate_size = 70;
  c.num_heads = 4;
  c.in_channels = 1;
  c.patch_size = 8;
  c.spatial_merge_size = 1;
  c.temporal_patch_size = 3;
  c.out_hidden_size = 36;
  c.num_position_embeddings = 81;
  c.deepstack_visual_indexes = {4, 1};
  c.rope_theta = 2000.0;
  return c;
}

// Field by field: an oracle independent of the writer's tables. First
// the fields every family has, then each family's own.
template <typename C>
void expect_same_shared(const C& a, const C& b) {
  EXPECT_EQ(a.depth, b.depth);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.in_channels, b.in_channels);
  EXPECT_EQ(a.patch_size, b.patch_size);
  EXPECT_EQ(a.spatial_merge_size, b.spatial_merge_size);
  EXPECT_EQ(a.temporal_patch_size, b.temporal_patch_size);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
}

void expect_same(const Qwen2VLVisionConfig& a, const Qwen2VLVisionConfig& b) {
  expect_same_shared(a, b);
  EXPECT_EQ(a.embed_dim, b.embed_dim);
  EXPECT_EQ(a.mlp_ratio, b.mlp_ratio);
}

void expect_same(
    const Qwen2_5VLVisionConfig& a, const Qwen2_5VLVisionConfig& b) {
  expect_same_shared(a, b);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.window_size, b.window_size);
  EXPECT_EQ(a.out_hidden_size, b.out_hidden_size);
  EXPECT_EQ(a.fullatt_block_indexes, b.fullatt_block_indexes);
}

void expect_same(const Qwen3VLVisionConfig& a, const Qwen3VLVisionConfig& b) {
  expect_same_shared(a, b);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.out_hidden_size, b.out_hidden_size);
  EXPECT_EQ(a.num_position_embeddings, b.num_position_embeddings);
  EXPECT_EQ(a.deepstack_visual_indexes, b.deepstack_visual_indexes);
}

void expect_same(const RadioVisionConfig& a, const RadioVisionConfig& b) {
  EXPECT_EQ(a.depth, b.depth);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.mlp_ratio, b.mlp_ratio);
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_EQ(a.layer_norm_eps, b.layer_norm_eps);
  EXPECT_EQ(a.in_channels, b.in_channels);
  EXPECT_EQ(a.patch_size, b.patch_size);
  EXPECT_EQ(a.max_img_size, b.max_img_size);
  EXPECT_EQ(a.num_cls_tokens, b.num_cls_tokens);
  EXPECT_EQ(a.num_registers, b.num_registers);
  EXPECT_EQ(a.projector_hidden_size, b.projector_hidden_size);
  EXPECT_EQ(a.out_hidden_size, b.out_hidden_size);
  EXPECT_EQ(a.final_layernorm, b.final_layernorm);
}

// Every RADIO field off its default.
RadioVisionConfig every_field_radio() {
  RadioVisionConfig c;
  c.depth = 5;
  c.hidden_size = 96;
  c.num_heads = 3;
  c.mlp_ratio = 2.5;
  c.hidden_act = "quick_gelu";
  c.layer_norm_eps = 1e-5;
  c.in_channels = 4;
  c.patch_size = 8;
  c.max_img_size = 256;
  c.num_cls_tokens = 1;
  c.num_registers = 0;
  c.projector_hidden_size = 200;
  c.out_hidden_size = 72;
  c.final_layernorm = true;
  return c;
}

// Every model type the parser knows, bare vision configs included.
std::vector<QwenVisionConfig> every_model_type() {
  Qwen3VLVisionConfig no_deepstack = every_field_qwen3();
  no_deepstack.deepstack_visual_indexes.clear();
  return {
      every_field_qwen2(),
      every_field_qwen2_5(),
      every_field_qwen3(),
      QwenVisionConfig(every_field_qwen3(), "qwen3_vl_moe"),
      QwenVisionConfig(no_deepstack, "qwen3_5"),
      QwenVisionConfig(no_deepstack, "qwen3_5_moe"),
      QwenVisionConfig(every_field_qwen2(), "qwen2_vl_vision"),
      QwenVisionConfig(every_field_qwen3(), "qwen3_vl_vision"),
      every_field_radio()};
}

TEST(QwenConfigWriter, RoundTripsEveryFieldOfEveryModelType) {
  for (const QwenVisionConfig& c : every_model_type()) {
    SCOPED_TRACE(c.model_type);
    const std::string text = qwen_vision_config_json(c);
    const QwenVisionConfig p = parse_qwen_vision_config(text);
    EXPECT_EQ(p.model_type, c.model_type);
    ASSERT_EQ(p.family(), c.family());
    p.visit([&](const auto& got) {
      expect_same(got, c.as<std::decay_t<decltype(got)>>());
    });
    EXPECT_EQ(qwen_vision_config_json(p), text) << "a fixed point";
  }
  // The tiny test configs too (written with HF's extra keys around them).
  for (auto family :
       {QwenFamily::kQwen2VL, QwenFamily::kQwen2_5VL, QwenFamily::kQwen3VL}) {
    const QwenVisionConfig c = tiny_config(family);
    const QwenVisionConfig p = parse_qwen_vision_config(hf_config_json(c));
    EXPECT_EQ(qwen_vision_config_json(p), qwen_vision_config_json(c));
  }
}

TEST(QwenConfigWriter, WritesHuggingFaceLayout) {
  using nlohmann::json;
  const json q25 =
      json::parse(qwen_vision_config_json(tiny_config(QwenFamily::kQwen2_5VL)));
  EXPECT_EQ(q25["model_type"], "qwen2_5_vl");
  const json& v = q25["vision_config"];
  EXPECT_EQ(v["window_size"], 8);
  EXPECT_EQ(v["fullatt_block_indexes"], json::array({1}));
  EXPECT_EQ(
      v["rope_parameters"],
      json({{"rope_theta", 10000.0}, {"rope_type", "axial"}}));
  // Exactly the fields of the family (HF's names), nothing else.
  const json q2 =
      json::parse(qwen_vision_config_json(tiny_config(QwenFamily::kQwen2VL)));
  std::vector<std::string> keys;
  for (auto it = q2["vision_config"].begin(); it != q2["vision_config"].end();
       ++it) {
    keys.push_back(it.key());
  }
  EXPECT_EQ(
      keys,
      (std::vector<std::string>{
          "depth",
          "embed_dim",
          "hidden_act",
          "hidden_size",
          "in_channels",
          "mlp_ratio",
          "num_heads",
          "patch_size",
          "rope_parameters",
          "spatial_merge_size",
          "temporal_patch_size"}));
  // A bare vision config is flat; Qwen3.5 has no DeepStack field.
  const json bare = json::parse(qwen_vision_config_json(
      QwenVisionConfig(every_field_qwen3(), "qwen3_vl_vision")));
  EXPECT_FALSE(bare.contains("vision_config"));
  EXPECT_EQ(bare["depth"], 5);
  Qwen3VLVisionConfig q35 = every_field_qwen3();
  q35.deepstack_visual_indexes.clear();
  const json j35 =
      json::parse(qwen_vision_config_json(QwenVisionConfig(q35, "qwen3_5")));
  EXPECT_FALSE(j35["vision_config"].contains("deepstack_visual_indexes"));
  EXPECT_EQ(j35["vision_config"]["num_position_embeddings"], 81);
}

TEST(QwenConfigWriter, SavesAFileOrIntoADirectory) {
  ScratchDir dir;
  const QwenVisionConfig c = every_field_qwen2_5();
  save_qwen_vision_config(dir.path(), c);
  const QwenVisionConfig from_dir = load_qwen_vision_config(dir.path());
  expect_same(
      from_dir.as<Qwen2_5VLVisionConfig>(), c.as<Qwen2_5VLVisionConfig>());
  const std::string file = dir.path() + "/other.json";
  save_qwen_vision_config(file, tiny_config(QwenFamily::kQwen3VL));
  EXPECT_EQ(load_qwen_vision_config(file).as<Qwen3VLVisionConfig>().depth, 2);
  EXPECT_TORCH_ERROR_CONTAINS(
      save_qwen_vision_config(dir.path() + "/no/such/dir/config.json", c),
      "for writing");
}

TEST(QwenConfigWriter, RefusesValuesTheParserWouldRefuse) {
  auto json_of = [](const QwenVisionConfig& c) { qwen_vision_config_json(c); };
  Qwen2VLVisionConfig q2 = every_field_qwen2();
  q2.depth = 0;
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(q2),
      "frameshard::qwen_vision_config_json: expected vision_config.depth to "
      "be an integer in [1, 256], got 0");
  q2 = every_field_qwen2();
  q2.mlp_ratio = -1;
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(q2), "vision_config.mlp_ratio to be a positive number, got -1");
  q2 = every_field_qwen2();
  q2.rope_theta = 0;
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(QwenVisionConfig(q2, "qwen2_vl_vision")),
      "expected rope_parameters.rope_theta to be a positive number, got 0");
  Qwen2_5VLVisionConfig q25 = every_field_qwen2_5();
  q25.fullatt_block_indexes = {1, -2};
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(q25),
      "vision_config.fullatt_block_indexes to be a list of non-negative "
      "integers, got an entry -2");
  // Qwen3.5 has no DeepStack: indexes would be dropped on reading.
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(QwenVisionConfig(every_field_qwen3(), "qwen3_5")),
      "vision_config.deepstack_visual_indexes to be empty (this model_type "
      "has no DeepStack), got 2 indexes");
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(QwenVisionConfig(every_field_qwen3(), "llava")),
      "expected model_type qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, "
      "qwen3_5 or qwen3_5_moe (or its \"_vision\" config), or "
      "nemotron_h_omni, got \"llava\"");
  EXPECT_TORCH_ERROR_CONTAINS(
      json_of(QwenVisionConfig(every_field_qwen3(), "qwen2_vl")),
      "expected a model_type of the qwen3-vl family for a qwen3-vl config, "
      "got \"qwen2_vl\" (qwen2-vl)");
}

TEST(QwenConfig, VariantAccessorsNameTheFamily) {
  const QwenVisionConfig def;
  EXPECT_EQ(def.family(), QwenFamily::kQwen3VL);
  EXPECT_EQ(def.model_type, "qwen3_vl");
  EXPECT_EQ(def.as<Qwen3VLVisionConfig>().depth, 27);
  const QwenVisionConfig q25 = Qwen2_5VLVisionConfig{};
  EXPECT_EQ(q25.family(), QwenFamily::kQwen2_5VL);
  EXPECT_EQ(q25.model_type, "qwen2_5_vl");
  EXPECT_EQ(QwenVisionConfig(Qwen2VLVisionConfig{}).model_type, "qwen2_vl");
  EXPECT_EQ(q25.in_features(), 3 * 2 * 14 * 14);
  EXPECT_EQ(q25.output_names(), std::vector<std::string>{"embeddings"});
  EXPECT_EQ(q25.visit([](const auto& c) { return c.depth; }), 32);
  EXPECT_TORCH_ERROR_CONTAINS(
      def.as<Qwen2VLVisionConfig>(),
      "frameshard::QwenVisionConfig::as: expected a qwen2-vl config, got a "
      "qwen3-vl one (model_type \"qwen3_vl\")");
}

}  // namespace
}  // namespace models
}  // namespace frameshard
