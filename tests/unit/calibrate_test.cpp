// Fitting the cost model to timings (frameshard/calibrate.h) and the
// calibration file the config's cost_alpha reads.
#include <frameshard/calibrate.h>
#include <frameshard/config.h>
#include <frameshard/cost.h>

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/temp_file.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;
using testing::TempFile;

std::vector<TimingSample> samples_of(double a, double b, double c) {
  std::vector<TimingSample> s;
  for (int64_t p : {64, 144, 256, 576, 1024, 2304, 4096}) {
    const double x = static_cast<double>(p);
    s.push_back({p, a * x * x + b * x + c});
  }
  return s;
}

TEST(FitQuadratic, RecoversKnownQuadratics) {
  for (const auto& [a, b, c] : std::vector<std::array<double, 3>>{
           {1e-9, 2e-7, 5e-4},  // seconds: a CPU tower
           {3e-8, 0.0, 0.0},    // pure quadratic
           {0.0, 4e-6, 0.0},    // pure linear
           {0.0, 0.0, 1e-3},    // constant
           {2.0, 3000.0, 7.0}}) {
    SCOPED_TRACE(std::to_string(a) + "," + std::to_string(b));
    const QuadraticFit fit = fit_quadratic(samples_of(a, b, c));
    EXPECT_NEAR(fit.model.a, a, 1e-6 * (a + b / 4096 + c / 4096 / 4096));
    EXPECT_NEAR(fit.model.b, b, 1e-6 * (a * 4096 + b + c / 4096));
    EXPECT_NEAR(fit.model.c, c, 1e-6 * (a * 4096 * 4096 + b * 4096 + c));
    EXPECT_LT(fit.max_relative_error, 1e-9);
    EXPECT_EQ(fit.relative_errors.size(), 7u);
    EXPECT_DOUBLE_EQ(fit.model.seconds_per_unit, 1.0);
    EXPECT_DOUBLE_EQ(fit.per_call, 0.0);
  }
}

TEST(FitQuadratic, SeparatesThePerCallConstant) {
  // t = 2 ms per call + k * (1e-9 p^2 + 2e-7 p + 1e-4): single frames alone
  // cannot tell 2 ms per call from 2 ms per frame; calls of 4 and 16 frames
  // can.
  std::vector<TimingSample> s;
  auto t = [](int64_t p, int64_t k) {
    const double x = static_cast<double>(p);
    return 2e-3 + static_cast<double>(k) * (1e-9 * x * x + 2e-7 * x + 1e-4);
  };
  for (int64_t p : {64, 256, 1024, 4096}) {
    s.push_back({p, t(p, 1), 1});
  }
  s.push_back({64, t(64, 4), 4});
  s.push_back({64, t(64, 16), 16});
  s.push_back({256, t(256, 4), 4});
  const QuadraticFit fit = fit_quadratic(s);
  EXPECT_NEAR(fit.per_call, 2e-3, 1e-9);
  EXPECT_NEAR(fit.model.c, 1e-4, 1e-9);
  EXPECT_NEAR(fit.model.b, 2e-7, 1e-12);
  EXPECT_NEAR(fit.model.a, 1e-9, 1e-15);
  EXPECT_LT(fit.max_relative_error, 1e-9);
  // Single frames only: the constant is folded into c.
  s.resize(4);
  const QuadraticFit single = fit_quadratic(s);
  EXPECT_DOUBLE_EQ(single.per_call, 0.0);
  EXPECT_NEAR(single.model.c, 2.1e-3, 1e-9);
}

TEST(FitQuadratic, CoefficientsStayNonNegative) {
  // t = p^2 - 500 p + 70000 has a negative linear term: the unconstrained
  // fit is exact but infeasible; NNLS drops b and fits a, c >= 0.
  std::vector<TimingSample> s;
  for (int64_t p : {100, 200, 300, 400, 500}) {
    const double x = static_cast<double>(p);
    s.push_back({p, x * x - 500 * x + 70000});
  }
  const QuadraticFit fit = fit_quadratic(s);
  EXPECT_GE(fit.model.a, 0.0);
  EXPECT_DOUBLE_EQ(fit.model.b, 0.0);
  EXPECT_GE(fit.model.c, 0.0);
  EXPECT_GT(fit.max_relative_error, 0.01);  // the quadratic cannot bend
}

TEST(FitQuadratic, MinimisesRelativeNotAbsoluteError) {
  // Noise of +-10 % on every size: the small frames must fit as well as the
  // large ones (an absolute fit would sacrifice them).
  std::vector<TimingSample> s = samples_of(1e-9, 2e-7, 5e-4);
  for (std::size_t i = 0; i < s.size(); ++i) {
    s[i].seconds *= (i % 2 == 0) ? 1.1 : 0.9;
  }
  const QuadraticFit fit = fit_quadratic(s);
  EXPECT_LT(fit.max_relative_error, 0.2);
  EXPECT_LT(std::abs(fit.relative_errors.front()), 0.2);
}

TEST(FitQuadratic, RejectsBadSamples) {
  expect_contains(
      error_of([] { fit_quadratic({}); }),
      "frameshard::fit_quadratic: expected at least one sample, got none");
  expect_contains(
      error_of([] {
        fit_quadratic({{64, 0.1}, {0, 0.1}});
      }),
      "expected samples[1].patch_rows > 0, got 0");
  expect_contains(
      error_of([] {
        fit_quadratic({{64, 1.0, 0}});
      }),
      "expected samples[0].frames > 0, got 0");
  expect_contains(
      error_of([] {
        fit_quadratic({{64, -1.0}});
      }),
      "expected samples[0].seconds finite and > 0, got -1");
}

TEST(CalibrationFile, RoundTripsThroughCostAlpha) {
  const CostModel m = CostModel::quadratic(1.25e-9, 3.5e-7, 4.75e-4);
  const std::string text =
      calibration_text(m, "qwen3-vl width 256\nsize 64: +1.0 %");
  expect_contains(text, "# qwen3-vl width 256\n# size 64: +1.0 %\n");
  const TempFile f(text);
  const CostModel back = parse_cost_alpha(f.path());
  EXPECT_DOUBLE_EQ(back.a, m.a);
  EXPECT_DOUBLE_EQ(back.b, m.b);
  EXPECT_DOUBLE_EQ(back.c, m.c);
  EXPECT_DOUBLE_EQ(back.seconds_per_unit, 1.0);
  expect_contains(back.label, "calibrated " + f.path());

  // The config accepts the path and plans with the file's model.
  Config c;
  c.frame_sharding.cost_alpha = f.path();
  EXPECT_DOUBLE_EQ(plan_options(c).cost(1024), m(1024));
}

TEST(CalibrationFile, ErrorsNameFieldExpectedAndActual) {
  std::string msg = error_of([] {
    parse_cost_alpha("/nonexistent/cal.txt", "qwen3-vl", "cost_alpha");
  });
  expect_contains(msg, "frameshard::read_calibration: cost_alpha: expected");
  expect_contains(msg, "got \"/nonexistent/cal.txt\", which cannot be read");

  const TempFile bad("# comment\nalpha=3\n");
  msg = error_of([&] { parse_cost_alpha(bad.path()); });
  expect_contains(msg, "quadratic:a,b,c");
  expect_contains(msg, "holding \"alpha=3\"");

  const TempFile two("quadratic:1,2,3\nquadratic:1,2,3\n");
  msg = error_of([&] { parse_cost_alpha(two.path()); });
  expect_contains(msg, "with a second value line");

  // Through the config: the full key path, then the file's own message.
  msg = error_of([] {
    apply_override(
        *std::make_unique<Config>(),
        std::string(kFrameShardingPath) + ".cost_alpha",
        "./missing_cal.txt");
  });
  expect_contains(
      msg, "distributed.multimodal.vision.frame_sharding.cost_alpha: expected");
  expect_contains(msg, "the path of a frameshard calibrate file");
  expect_contains(msg, "./missing_cal.txt (frameshard::read_calibration");
}

TEST(CalibrationFile, PathsAreTellable) {
  EXPECT_TRUE(is_calibration_path("cal.txt"));
  EXPECT_TRUE(is_calibration_path("/tmp/x"));
  EXPECT_FALSE(is_calibration_path("1.5"));
  EXPECT_FALSE(is_calibration_path("quadratic:1.5,1,1"));
  EXPECT_FALSE(is_calibration_path("auto"));
}

}  // namespace
}  // namespace frameshard
