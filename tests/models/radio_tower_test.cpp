// Nemotron Omni's RADIO tower in one process (frameshard/models/radio_tower.h):
// config.json as transformers writes it (the fields outside vision_config
// too) and the layouts it refuses by name; frames independent in float64;
// prefix tokens, positions and the pixel shuffle each move the output; split
// pieces and odd grids refused; weights loaded beside the language model,
// layer scales optional; its cost counts the prefix tokens. Numerical parity
// with transformers is tests/python/test_hf_parity.py (nemotron_h_omni),
// sharded parity tests/dist/towers/qwen_towers_test.cpp.

#include <frameshard/models/qwen_vision.h>

#include "testing/qwen_fixtures.h"
#include "testing/scratch_dir.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using namespace testing;

// A config.json as save_pretrained writes it for a tiny Nemotron Omni.
nlohmann::json omni_json() {
  return nlohmann::json::parse(R"({
    "model_type": "nemotron_h_omni", "architectures": ["NemotronH_Omni_Reasoning_V3"],
    "downsample_ratio": 0.5, "projector_hidden_size": 48, "vision_hidden_size": 32,
    "video_temporal_patch_size": 2, "image_token_id": 3,
    "vision_config": {"model_type": "radio", "hidden_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 2, "mlp_ratio": 4.0, "hidden_act": "gelu", "layer_norm_eps": 1e-06,
      "num_channels": 3, "patch_size": 4, "max_img_size": 32, "num_cls_tokens": 2,
      "num_registers": 3, "qkv_bias": true, "use_swiglu_ffn": false, "summary_idxs": [0, 1],
      "video_temporal_patch_size": 2},
    "text_config": {"model_type": "nemotron_h", "hidden_size": 24, "num_nextn_predict_layers": 1}
  })");
}

TEST(RadioConfig, ReadsTheOmniConfigAndRoundTrips) {
  const QwenVisionConfig cfg = parse_qwen_vision_config(omni_json().dump());
  ASSERT_EQ(cfg.family(), QwenFamily::kRadio);
  const auto& c = cfg.as<RadioVisionConfig>();
  EXPECT_EQ(c.depth, 2);
  EXPECT_EQ(c.patch_size, 4);
  EXPECT_EQ(c.prefix_tokens(), 5);
  EXPECT_EQ(c.grid_per_side(), 8);
  EXPECT_EQ(c.projector_hidden_size, 48);
  EXPECT_EQ(c.out_hidden_size, 24);
  EXPECT_TRUE(c.final_layernorm);
  EXPECT_EQ(cfg.in_features(), 3 * 4 * 4);
  EXPECT_EQ(cfg.spatial_merge_size(), 2);
  EXPECT_EQ(cfg.temporal_patch_size(), 1);
  EXPECT_EQ(cfg.out_hidden_size(), 24);
  // What the writer writes reads back equal.
  const auto again = parse_qwen_vision_config(qwen_vision_config_json(cfg));
  const auto& a = again.as<RadioVisionConfig>();
  EXPECT_EQ(again.model_type, "nemotron_h_omni");
  EXPECT_EQ(a.num_registers, 3);
  EXPECT_EQ(a.max_img_size, 32);
  EXPECT_EQ(a.layer_norm_eps, 1e-6);
  EXPECT_EQ(a.out_hidden_size, 24);
  EXPECT_TRUE(a.final_layernorm);
  // No MTP layers: no final LayerNorm (transformers builds none).
  auto j = omni_json();
  j["text_config"]["num_nextn_predict_layers"] = 0;
  EXPECT_FALSE(parse_qwen_vision_config(j.dump())
                   .as<RadioVisionConfig>()
                   .final_layernorm);
}

TEST(RadioConfig, RefusesLayoutsItDoesNotBuildNamingTheField) {
  auto error_of = [](const nlohmann::json& j) {
    return torch_error_of([&] { parse_qwen_vision_config(j.dump()); });
  };
  auto j = omni_json();
  j["vision_config"]["use_swiglu_ffn"] = true;
  EXPECT_NE(
      error_of(j).find("vision_config.use_swiglu_ffn to be false"),
      std::string::npos);
  j = omni_json();
  j["downsample_ratio"] = 0.25;
  EXPECT_NE(error_of(j).find("downsample_ratio 0.5"), std::string::npos);
  j = omni_json();
  j["vision_hidden_size"] = 64;
  EXPECT_NE(error_of(j).find("vision_hidden_size to equal"), std::string::npos);
  j = omni_json();
  j["vision_config"]["num_registers"] = -1;
  EXPECT_NE(
      error_of(j).find("vision_config.num_registers to be an integer in [0"),
      std::string::npos);
  j = omni_json();
  j["model_type"] = "nemotron_h_omni_vision";
  EXPECT_NE(
      error_of(j).find("expected model_type nemotron_h_omni"),
      std::string::npos);
}

TEST(RadioTower, FramesAreIndependentAndEveryPartMatters) {
  const auto cfg = tiny_config(QwenFamily::kRadio);
  const QwenVisionModel m = random_model(cfg, at::kDouble, 7);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kDouble);
  const at::Tensor whole = run_tower(m, pixels, kMixed)[0];
  ASSERT_EQ(whole.size(0), pixels.size(0) / 4);
  ASSERT_EQ(whole.size(1), 24);
  std::vector<at::Tensor> parts;
  int64_t row = 0;
  for (const auto& g : kMixed) {
    for (int64_t t = 0; t < g.t; ++t) {
      parts.push_back(
          run_tower(m, pixels.narrow(0, row, g.h * g.w), {{1, g.h, g.w}})[0]);
      row += g.h * g.w;
    }
  }
  EXPECT_LE(max_abs_diff(at::cat(parts, 0), whole), 1e-12);
  // Each piece of RADIO's chain moves the output: the prefix tokens, the
  // position table, the final LayerNorm and the projector's norm.
  for (const char* name :
       {"vision_model.radio_model.model.patch_generator.cls_token.token",
        "vision_model.radio_model.model.patch_generator.pos_embed",
        "vision_projector.vision_final_layernorm.weight",
        "mlp1.0.weight",
        "vision_model.radio_model.model.blocks.1.layer_scale2.lambda1"}) {
    const QwenVisionModel other = testing::clone_model(m);
    other.module->named_parameters()[name].mul_(1.5);
    EXPECT_GT(max_abs_diff(run_tower(other, pixels, kMixed)[0], whole), 1e-3)
        << name;
  }
}

TEST(RadioTower, RefusesPiecesAndOddGrids) {
  const auto cfg = tiny_config(QwenFamily::kRadio);
  const QwenVisionModel m = random_model(cfg, at::kFloat, 3);
  TowerInput in = whole_frames_input(at::randn({16, 12}), {{1, 4, 4}});
  in.pieces = {FramePiece{0, 0, 8}};
  in.pixel_values = at::randn({8, 12});
  in.cu_seqlens = at::Tensor();
  in.exchange = [](const at::Tensor& rows) {
    return std::vector<at::Tensor>{rows, rows};
  };
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "does not take pieces");
  EXPECT_TORCH_ERROR_CONTAINS(
      run_tower(m, at::randn({12, 12}), {{1, 3, 4}}),
      "divisible by spatial_merge_size 2");
  EXPECT_FALSE(takes_pieces(cfg));
  EXPECT_TRUE(takes_pieces(tiny_config(QwenFamily::kQwen3VL)));
}

TEST(RadioWeights, LoadBesideTheLanguageModelWithOptionalLayerScales) {
  const auto cfg = tiny_config(QwenFamily::kRadio);
  const QwenVisionModel src = random_model(cfg, at::kFloat, 1);
  torch::manual_seed(2);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kFloat);
  auto tensors = vision_state_dict(*src.module, "");
  tensors["language_model.backbone.embeddings.weight"] = at::ones({16, 4});
  for (const auto& unused : radio_unused_tensors()) {
    tensors[unused] = at::zeros({2});  // summary_idxs, the video projection
  }
  ScratchDir dir;
  write_bytes(dir.path() + "/config.json", qwen_vision_config_json(cfg));
  save_safetensors(dir.path() + "/model.safetensors", tensors);
  const QwenVisionModel m = load_qwen_vision(dir.path());
  EXPECT_EQ(m.weights->prefix, "");
  EXPECT_EQ(
      m.weights->loaded, static_cast<int64_t>(src.module->parameters().size()));
  EXPECT_EQ(m.weights->ignored, 3);
  EXPECT_TRUE(at::equal(
      run_tower(m, pixels, kMixed)[0], run_tower(src, pixels, kMixed)[0]));

  // NVIDIA's checkpoints omit the layer scales: they stay 1 (RadioConfig's
  // layerscale_value), counted as defaulted.
  auto without = tensors;
  for (auto it = without.begin(); it != without.end();) {
    it = it->first.find("lambda1") != std::string::npos ? without.erase(it)
                                                        : std::next(it);
  }
  save_safetensors(dir.path() + "/model.safetensors", without);
  const QwenVisionModel d = load_qwen_vision(dir.path());
  EXPECT_EQ(d.weights->defaulted, 2 * cfg.as<RadioVisionConfig>().depth);
  EXPECT_TRUE(at::equal(
      d.module->named_parameters()
          ["vision_model.radio_model.model.blocks.0.layer_scale1.lambda1"],
      at::ones({32})));

  // Under the tower's roots, a stray tensor is unexpected; a missing
  // projector weight is missing; both in one error.
  auto bad = tensors;
  bad["vision_model.radio_model.model.blocks.9.attn.qkv.weight"] =
      at::ones({2});
  bad.erase("mlp1.3.weight");
  save_safetensors(dir.path() + "/model.safetensors", bad);
  const std::string e = torch_error_of([&] { load_qwen_vision(dir.path()); });
  EXPECT_NE(e.find("1 missing: mlp1.3.weight"), std::string::npos) << e;
  EXPECT_NE(
      e.find("1 unexpected: vision_model.radio_model.model.blocks.9"),
      std::string::npos)
      << e;
}

TEST(RadioCost, CountsThePrefixTokensAndTheProjector) {
  const auto cfg = tiny_config(QwenFamily::kRadio);
  const TowerDims d = tower_dims(cfg);
  EXPECT_EQ(d.name, "radio");
  EXPECT_EQ(d.prefix_tokens, 3);
  EXPECT_EQ(d.merger_hidden, 40);
  const CostModel with = flop_cost_model(d);
  TowerDims no_prefix = d;
  no_prefix.prefix_tokens = 0;
  const CostModel without = flop_cost_model(no_prefix);
  // Layers on p + P tokens, the projector on p: cost(p) - cost_0(p) is
  // exactly the prefix's share, (p + P)^2 - p^2 + b_layers * P.
  // b_layers = depth * (2d + f) / depth for width 32 and MLP 48.
  const double b_layers = 2 * 32 + 48;
  for (int64_t p : {4, 64, 1024}) {
    const double extra = double((p + 3) * (p + 3) - p * p) + b_layers * 3;
    EXPECT_NEAR(with(p) - without(p), extra, 1e-9 * with(p)) << p;
  }
  EXPECT_GT(with.c, 0.0);
}

}  // namespace
}  // namespace models
}  // namespace frameshard
