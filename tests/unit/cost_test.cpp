#include <frameshard/cost.h>
#include <frameshard/error.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

// The FLOPs of one frame of p patches through the whole tower, counted layer
// by layer (multiply-adds), independently of the closed form in cost.cpp.
double tower_macs(const TowerDims& t, int64_t p) {
  const double d = static_cast<double>(t.hidden);
  const double f = static_cast<double>(t.intermediate);
  const double pp = static_cast<double>(p);
  double macs = 0.0;
  for (int64_t layer = 0; layer < t.depth; ++layer) {
    const bool full =
        t.window_patches == 0 || std::find(
                                     t.full_attention_layers.begin(),
                                     t.full_attention_layers.end(),
                                     layer) != t.full_attention_layers.end();
    const double span =
        full ? pp : static_cast<double>(std::min(p, t.window_patches));
    macs += 4.0 * pp * d * d;                        // QKV + output
    macs += (t.gated_mlp ? 3.0 : 2.0) * pp * d * f;  // MLP
    macs += 2.0 * pp * span * d;                     // QK^T and AV
  }
  return macs;
}

TEST(TowerPreset, HuggingFaceDims) {
  const TowerDims& q2 = tower_preset("qwen2-vl");
  EXPECT_EQ(q2.depth, 32);
  EXPECT_EQ(q2.hidden, 1280);
  EXPECT_EQ(q2.intermediate, 5120);
  EXPECT_FALSE(q2.gated_mlp);
  const TowerDims& q25 = tower_preset("qwen2.5-vl");
  EXPECT_EQ(q25.intermediate, 3420);
  EXPECT_TRUE(q25.gated_mlp);
  EXPECT_EQ(q25.window_patches, 64);
  EXPECT_EQ(q25.full_attention_layers, (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_EQ(q25.full_layers(), 4);
  EXPECT_EQ(q25.window_layers(), 28);
  const TowerDims& q3 = tower_preset("qwen3-vl");
  EXPECT_EQ(q3.depth, 27);
  EXPECT_EQ(q3.hidden, 1152);
  EXPECT_EQ(q3.intermediate, 4304);
  EXPECT_EQ(q3.full_layers(), 27);
  EXPECT_EQ(q3.window_layers(), 0);
  const TowerDims& small = tower_preset("qwen3-vl-small");
  EXPECT_EQ(small.depth, 24);
  EXPECT_EQ(small.hidden, 1024);
  EXPECT_EQ(small.intermediate, 4096);
  const TowerDims& q35 = tower_preset("qwen3.5");
  EXPECT_EQ(q35.hidden, q3.hidden);
  EXPECT_EQ(q35.intermediate, q3.intermediate);
  EXPECT_EQ(q35.depth, q3.depth);
  EXPECT_EQ(
      tower_preset_names(),
      (std::vector<std::string>{
          "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3-vl-small", "qwen3.5"}));
}

TEST(TowerPreset, UnknownNameListsPresets) {
  std::string m = error_of([] { tower_preset("qwen4"); });
  expect_contains(m, "frameshard::tower_preset: expected one of qwen2-vl, ");
  expect_contains(m, "qwen3.5");
  expect_contains(m, "got \"qwen4\"");
}

TEST(FlopCostModel, PresetAlphas) {
  CostModel q3 = flop_cost_model(tower_preset("qwen3-vl"));
  EXPECT_EQ(q3.a, 1.0);
  EXPECT_EQ(q3.b, 6608.0);
  EXPECT_EQ(q3.c, 0.0);
  EXPECT_EQ(q3.window_coef, 0.0);
  EXPECT_EQ(q3.effective_alpha(), 6608.0);
  EXPECT_EQ(q3.label, "qwen3-vl FLOPs, alpha=6608");
  EXPECT_EQ(flop_cost_model(tower_preset("qwen3.5")).b, 6608.0);
  EXPECT_EQ(flop_cost_model(tower_preset("qwen2-vl")).b, 7680.0);
  EXPECT_EQ(flop_cost_model(tower_preset("qwen3-vl-small")).b, 6144.0);

  CostModel q25 = flop_cost_model(tower_preset("qwen2.5-vl"));
  EXPECT_EQ(q25.b, 61520.0);
  EXPECT_EQ(q25.window_coef, 7.0);
  EXPECT_EQ(q25.window, 64);
  EXPECT_EQ(q25.effective_alpha(), 61968.0);
  // Below the window every layer attends over the whole frame.
  EXPECT_EQ(q25(32), 32.0 * 32 + 61520.0 * 32 + 7.0 * 32 * 32);
  EXPECT_EQ(q25(100), 100.0 * 100 + 61520.0 * 100 + 7.0 * 100 * 64);
}

TEST(FlopCostModel, MatchesLayerByLayerCount) {
  // cost(p) * 2 * d * L_full must equal the tower's multiply-adds.
  for (const std::string& name : tower_preset_names()) {
    const TowerDims& t = tower_preset(name);
    const CostModel m = flop_cost_model(t);
    const double scale = 2.0 * static_cast<double>(t.hidden) *
                         static_cast<double>(t.full_layers());
    for (int64_t p : {4, 16, 63, 64, 65, 256, 1024, 16384}) {
      const double expected = tower_macs(t, p);
      EXPECT_NEAR(m(p) * scale, expected, expected * 1e-12)
          << name << " p=" << p;
    }
  }
  TowerDims custom;
  custom.name = "custom";
  custom.depth = 6;
  custom.hidden = 8;
  custom.intermediate = 20;
  custom.gated_mlp = true;
  custom.window_patches = 16;
  custom.full_attention_layers = {5, 2};
  const CostModel m = flop_cost_model(custom);
  EXPECT_EQ(m.b, 6.0 * (16 + 30) / 2);
  EXPECT_EQ(m.window_coef, 2.0);
  for (int64_t p : {1, 8, 16, 17, 100}) {
    EXPECT_NEAR(m(p) * 2 * 8 * 2, tower_macs(custom, p), 1e-6) << p;
  }
}

TEST(FlopCostModel, RejectsInvalidTowers) {
  TowerDims t;
  t.name = "broken";
  t.depth = 0;
  t.hidden = 8;
  t.intermediate = 8;
  std::string m = error_of([&] { flop_cost_model(t); });
  expect_contains(
      m, "frameshard::flop_cost_model: expected broken.depth > 0, got 0");
  t.depth = 4;
  t.window_patches = 16;  // windows but no full-attention layer
  m = error_of([&] { flop_cost_model(t); });
  expect_contains(m, "broken.full_attention_layers");
  expect_contains(m, "got 0 entries");
  t.full_attention_layers = {4};  // out of range
  m = error_of([&] { flop_cost_model(t); });
  expect_contains(m, "[0, 4)");
  t.full_attention_layers = {1, 1};  // duplicate
  m = error_of([&] { flop_cost_model(t); });
  expect_contains(m, "distinct");
}

TEST(CostModel, AlphaAndQuadratic) {
  CostModel m = CostModel::from_alpha(100);
  EXPECT_EQ(m(10), 10.0 * 110);
  EXPECT_EQ(m.label, "alpha=100");
  EXPECT_EQ(CostModel::from_alpha(0)(7), 49.0);
  EXPECT_EQ(CostModel{}(3), 9.0);  // default: alpha 0
  CostModel q = CostModel::quadratic(0.5, 2, 3);
  EXPECT_EQ(q(10), 0.5 * 100 + 20 + 3);
  EXPECT_EQ(q.label, "quadratic a=0.5,b=2,c=3");
  std::string msg = error_of([] { CostModel::from_alpha(-1); });
  expect_contains(msg, "expected a finite alpha >= 0, got -1");
  msg = error_of([] { CostModel::quadratic(1, -2, 0); });
  expect_contains(msg, "b=-2");
}

TEST(AutomodelCostModel, ThreeTimesHidden) {
  CostModel m = automodel_cost_model(tower_preset("qwen3-vl"));
  EXPECT_EQ(m.b, 3456.0);
  EXPECT_EQ(m.label, "automodel (3*hidden=3456)");
  // The FLOP count gives about 1.9x more linear work.
  EXPECT_NEAR(flop_cost_model(tower_preset("qwen3-vl")).b / m.b, 1.912, 0.001);
}

TEST(ParseCostAlpha, AcceptedSpecs) {
  CostModel m = parse_cost_alpha("auto");
  EXPECT_EQ(m.b, 6608.0);
  EXPECT_EQ(m.label, "auto (qwen3-vl FLOPs, alpha=6608)");
  EXPECT_EQ(parse_cost_alpha("auto", "qwen2-vl").b, 7680.0);
  EXPECT_EQ(
      parse_cost_alpha("auto", "qwen2-vl").label,
      "auto (qwen2-vl FLOPs, alpha=7680)");

  m = parse_cost_alpha("512");
  EXPECT_EQ(m.b, 512.0);
  EXPECT_EQ(m.a, 1.0);
  EXPECT_EQ(m.label, "alpha=512");
  EXPECT_EQ(parse_cost_alpha("0").b, 0.0);

  m = parse_cost_alpha("qwen2.5-vl");
  EXPECT_EQ(m.b, 61520.0);
  EXPECT_EQ(m.window_coef, 7.0);
  EXPECT_EQ(m.window, 64);
  EXPECT_EQ(m.effective_alpha(), 61968.0);
  EXPECT_NE(m.label.find("qwen2.5-vl FLOPs"), std::string::npos) << m.label;

  m = parse_cost_alpha("automodel");
  EXPECT_EQ(m.b, 3456.0);
  EXPECT_EQ(m.label, "automodel (3*hidden=3456)");
  m = parse_cost_alpha("automodel:qwen2-vl");
  EXPECT_EQ(m.b, 3840.0);
  EXPECT_EQ(m.label, "automodel:qwen2-vl (3*hidden=3840)");

  m = parse_cost_alpha("quadratic:1,2.5,3");
  EXPECT_EQ(m.a, 1.0);
  EXPECT_EQ(m.b, 2.5);
  EXPECT_EQ(m.c, 3.0);
  EXPECT_EQ(m(10), 100 + 25 + 3);
  EXPECT_EQ(m.label, "quadratic a=1,b=2.5,c=3");
}

TEST(ParseCostAlpha, RejectsWithFieldName) {
  for (const char* bad :
       {"AUTO",
        "-1",
        "1.5",
        "",
        " 5",
        "5 ",
        "+5",
        "auto ",
        "1e3",
        "nan",
        "inf",
        "qwen9",
        "automodel:",
        "automodel:foo",
        "quadratic:1,2",
        "quadratic:1,2,3,4",
        "quadratic:-1,0,0",
        "quadratic:a,b,c",
        "quadratic:1,,3",
        "quadratic:1,2,inf",
        "99999999999999999999999"}) {
    std::string m = error_of([&] {
      parse_cost_alpha(bad, "qwen3-vl", "frame_sharding.cost_alpha");
    });
    expect_contains(
        m, "frameshard::parse_cost_alpha: frame_sharding.cost_alpha");
    expect_contains(m, "expected");
    expect_contains(m, std::string("got \""));
  }
  std::string m = error_of([] { parse_cost_alpha("AUTO"); });
  expect_contains(m, "cost_alpha: expected a non-negative integer, \"auto\"");
  expect_contains(m, "got \"AUTO\"");
  m = error_of([] { parse_cost_alpha("auto", "nope"); });
  expect_contains(m, "cost_alpha: expected a tower preset");
  expect_contains(m, "got \"nope\"");
}

}  // namespace
}  // namespace frameshard
