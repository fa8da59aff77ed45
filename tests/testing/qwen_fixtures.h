// File: tests/testing/qwen_fixtures.h
//
// Shared fixtures of the Qwen tower tests (tests/models/*, the multi-rank
// tests/dist/towers/qwen_towers_test.cpp): tiny configs of every family, random
// towers, tower runs on a grid, model directories as Hugging Face writes
// them, and comparison helpers.
//
// Usage:
//   using namespace frameshard::testing;
//   const auto cfg = tiny_config(models::QwenFamily::kQwen3VL);
//   const auto m = random_model(cfg, at::kDouble, /*seed=*/7);
//   const auto outs = run_tower(m, random_pixels(cfg, kMixed, at::kDouble),
//                               kMixed);
#pragma once

#include <frameshard/models/qwen_vision.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
// Test names and failure messages print the family, not its bytes.
void PrintTo(QwenFamily family, std::ostream* os);
}  // namespace models

namespace testing {

/// "1.23e-14".
std::string sci(double v);
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

at::Tensor grid_tensor(const std::vector<GridThw>& grid);
/// One int32 segment per frame.
at::Tensor cu_tensor(const std::vector<GridThw>& grid);
int64_t patch_rows(const std::vector<GridThw>& grid);

/// Images mixed with videos; 6 x 10 frames give Qwen2.5-VL partial windows.
extern const std::vector<GridThw> kMixed;

/// The per-family suite: TEST_P(QwenFamilyTest, ...) in any file of an
/// executable, instantiated once per executable as
///   INSTANTIATE_TEST_SUITE_P(Families, QwenFamilyTest,
///       ::testing::Values(kQwen2VL, kQwen2_5VL, kQwen3VL), family_name);
class QwenFamilyTest : public ::testing::TestWithParam<models::QwenFamily> {};

/// Parameterised test names: "Qwen2VL", "Qwen2_5VL", "Qwen3VL".
std::string family_name(
    const ::testing::TestParamInfo<models::QwenFamily>& info);

/// Tiny towers (depth 2, width 32): in_features 3 * 2 * 2 * 2 = 24,
/// output width 24. Qwen2.5-VL: 4 x 4-patch windows, layer 1 full
/// attention; Qwen3-VL: a 4 x 4 position table, DeepStack after both layers;
/// RADIO: in_features 3 * 2 * 2 = 12, a 4 x 4 position table, 3 prefix
/// tokens, the final LayerNorm and a projector of width 40.
models::QwenVisionConfig tiny_config(models::QwenFamily family);

/// A config.json as Hugging Face's save_pretrained writes it: the writer's
/// fields plus keys frameshard ignores (architectures, a token text part,
/// the vision config's own model_type, ...).
std::string hf_config_json(const models::QwenVisionConfig& config);

/// Every parameter random and O(1)-sensitive: norms around 1, weights
/// scaled by 1/sqrt(fan_in) so attention is far from uniform.
void randomize(torch::nn::Module& m, uint64_t seed);
models::QwenVisionModel random_model(
    const models::QwenVisionConfig& c, at::ScalarType dtype, uint64_t seed);
/// A tower of `config` in src's dtype whose parameter `name` holds the
/// values of src's parameter source_name(name) (the same name when not
/// given): the same weights under a changed config.
models::QwenVisionModel with_parameters_of(
    const models::QwenVisionConfig& config,
    const models::QwenVisionModel& src,
    const std::function<std::string(std::string)>& source_name = {});
/// Same config, dtype and parameter values; a separate module.
models::QwenVisionModel clone_model(const models::QwenVisionModel& src);

std::vector<at::Tensor> run_tower(
    const models::QwenVisionModel& m,
    const at::Tensor& pixels,
    const std::vector<GridThw>& grid);
at::Tensor random_pixels(
    const models::QwenVisionConfig& c,
    const std::vector<GridThw>& grid,
    at::ScalarType dtype);

void write_bytes(const std::string& path, const std::string& bytes);
std::string read_bytes(const std::string& path);

/// Writes config.json and the tower's tensors (plus a language-model
/// tensor the loader must ignore) as a Hugging Face model directory, in
/// one file or `shards` files with an index.
void write_model_dir(
    const std::string& dir,
    const models::QwenVisionModel& m,
    const std::string& prefix,
    int shards = 1);

}  // namespace testing
}  // namespace frameshard
