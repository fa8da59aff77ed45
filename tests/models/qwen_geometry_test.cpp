// The Qwen towers' index math (src/models/qwen_geometry.h), where it is not
// covered through the towers: the rotary tables' values.

#include "models/qwen_geometry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace frameshard {
namespace models {
namespace {

// cos and sin are evaluated once per coordinate value, in double, and
// rounded: equal to the correctly rounded value of each row's angle (the
// same float product coordinate * inv_freq as transformers' table), in one
// thread. torch's CPU cos of the whole [rows, 2, f] angle tensor was not:
// within an ulp on most runs, and about 1.5e-4 off on one thread's chunk in
// a few fresh processes under load.
TEST(RotaryTables, AreTheCorrectlyRoundedCosAndSinOfEveryRowsAngles) {
  const std::vector<GridThw> grid = {{1, 64, 64}, {2, 16, 8}};
  const at::Tensor coords = detail::patch_coordinates(grid, 2);
  const int64_t head_dim = 64;
  const double theta = 10000.0;
  const detail::Rotary r =
      detail::rotary_tables(coords, head_dim, theta, at::kFloat);
  const int64_t rows = coords.size(0);
  const int64_t f = head_dim / 4;
  ASSERT_EQ(r.cos.sizes(), (at::IntArrayRef{rows, head_dim}));
  ASSERT_EQ(r.sin.sizes(), (at::IntArrayRef{rows, head_dim}));
  const at::Tensor inv = at::reciprocal(at::pow(
      theta, at::arange(0, head_dim / 2, 2, at::kFloat) / (head_dim / 2)));
  const float* inv_p = inv.data_ptr<float>();
  const int64_t* co = coords.data_ptr<int64_t>();
  const float* c = r.cos.data_ptr<float>();
  const float* s = r.sin.data_ptr<float>();
  int64_t mismatches = 0;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t axis = 0; axis < 2; ++axis) {
      for (int64_t i = 0; i < f; ++i) {
        const float angle = static_cast<float>(co[2 * row + axis]) * inv_p[i];
        const float want_c = static_cast<float>(std::cos(double{angle}));
        const float want_s = static_cast<float>(std::sin(double{angle}));
        for (int64_t half = 0; half < 2; ++half) {  // the table repeats
          const int64_t col = half * 2 * f + axis * f + i;
          mismatches += c[row * head_dim + col] != want_c;
          mismatches += s[row * head_dim + col] != want_s;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << 2 * r.cos.numel() << " entries";
}

TEST(RotaryTables, OfNoRowsAreEmpty) {
  const detail::Rotary r = detail::rotary_tables(
      at::zeros({0, 2}, at::kLong), 16, 10000.0, at::kDouble);
  EXPECT_EQ(r.cos.sizes(), (at::IntArrayRef{0, 16}));
  EXPECT_EQ(r.sin.scalar_type(), at::kDouble);
}

}  // namespace
}  // namespace models
}  // namespace frameshard
