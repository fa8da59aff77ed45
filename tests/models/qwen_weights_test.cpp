// Loading Hugging Face checkpoints into the Qwen towers
// (frameshard/models/{hf_weights,qwen_factory}.h), per family: HF parameter
// names under "model.visual." or "visual.", one file or sharded, reproduce
// the saved tower exactly; dtype conversion; one error listing missing /
// unexpected / mis-shaped / wrongly typed tensors, and bad files.

#include <frameshard/models/qwen_vision.h>

#include "testing/qwen_fixtures.h"
#include "testing/scratch_dir.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>

namespace frameshard {
namespace models {
namespace {

using namespace testing;

TEST_P(QwenFamilyTest, LoadsHuggingFaceNamesFromEitherPrefixAndShards) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel src = random_model(cfg, at::kFloat, 1);
  torch::manual_seed(2);
  const at::Tensor pixels = random_pixels(cfg, kMixed, at::kFloat);
  const auto want = run_tower(src, pixels, kMixed);
  ASSERT_EQ(want.size(), cfg.output_names().size());
  EXPECT_FALSE(src.weights.has_value()) << "a random tower loaded nothing";
  for (const auto& prefix : {"model.visual.", "visual."}) {
    for (int shards : {1, 3}) {
      ScratchDir dir;
      write_model_dir(dir.path(), src, prefix, shards);
      const QwenVisionModel m = load_qwen_vision(dir.path());
      ASSERT_TRUE(m.weights.has_value());
      EXPECT_EQ(m.weights->prefix, prefix);
      EXPECT_EQ(m.weights->files.size(), static_cast<size_t>(shards));
      EXPECT_EQ(
          m.weights->loaded,
          static_cast<int64_t>(src.module->parameters().size()));
      EXPECT_EQ(m.weights->ignored, 1) << "the language-model tensor";
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
  ScratchDir dir;
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
  EXPECT_TORCH_ERROR_CONTAINS(
      load_qwen_vision(dir.path(), o), "expected dtype");
}

TEST_P(QwenFamilyTest, LoaderListsMissingUnexpectedMisshapedAndBadTensors) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel src = random_model(cfg, at::kFloat, 5);
  const std::string p = "model.visual.";
  auto with =
      [&](const std::function<void(std::map<std::string, at::Tensor>&)>& edit) {
        ScratchDir dir;
        write_bytes(dir.path() + "/config.json", hf_config_json(cfg));
        auto t = vision_state_dict(*src.module, p);
        edit(t);
        save_safetensors(dir.path() + "/model.safetensors", t);
        return torch_error_of([&] { load_qwen_vision(dir.path()); });
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
    ScratchDir dir;
    write_bytes(dir.path() + "/config.json", hf_config_json(cfg));
    write_bytes(dir.path() + "/model.safetensors", "not a safetensors file");
    EXPECT_TORCH_ERROR_CONTAINS(load_qwen_vision(dir.path()), "header length");
    std::remove((dir.path() + "/model.safetensors").c_str());
    EXPECT_TORCH_ERROR_CONTAINS(load_qwen_vision(dir.path()), "got neither");
  }
}

}  // namespace
}  // namespace models
}  // namespace frameshard
