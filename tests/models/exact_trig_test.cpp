// cos and sin from libm (src/tower/exact_trig.h): the rotary tables of the
// towers and of the A/B's decoder.

#include "tower/exact_trig.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace frameshard {
namespace detail {
namespace {

// Large enough that torch would split an elementwise op over threads: every
// entry is libm's double cos / sin of the float angle, bit for bit.
TEST(ExactCosSin, IsLibmsDoubleCosAndSinOfEveryElement) {
  at::manual_seed(7);
  const at::Tensor angles =
      (at::rand({512, 1024}, at::kFloat) - 0.5) * 400.0;  // [-200, 200)
  const CosSin t = exact_cos_sin(angles);
  ASSERT_EQ(t.cos.sizes(), angles.sizes());
  ASSERT_EQ(t.sin.scalar_type(), at::kDouble);
  const float* a = angles.data_ptr<float>();
  const double* c = t.cos.data_ptr<double>();
  const double* s = t.sin.data_ptr<double>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < angles.numel(); ++i) {
    mismatches += c[i] != std::cos(double{a[i]});
    mismatches += s[i] != std::sin(double{a[i]});
  }
  EXPECT_EQ(mismatches, 0) << "of " << 2 * angles.numel() << " entries";
}

TEST(ExactCosSin, RefusesIntegerAnglesNamingTheType) {
  try {
    exact_cos_sin(at::arange(4));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace())
            .find("frameshard::exact_cos_sin: expected floating-point "
                  "angles, got Long"),
        std::string::npos)
        << e.what_without_backtrace();
  }
}

}  // namespace
}  // namespace detail
}  // namespace frameshard
