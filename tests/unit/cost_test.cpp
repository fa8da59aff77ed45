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
  // The layers see the frame's prefix tokens too (RADIO's cls + registers).
  const double n = pp + static_cast<double>(t.prefix_tokens);
  double macs = 0.0;
  for (int64_t layer = 0; layer < t.depth; ++layer) {
    const bool full =
        t.window_patches == 0 || std::find(
                                     t.full_attention_layers.begin(),
                                     t.full_attention_layers.end(),
                                     layer) != t.full_attention_layers.end();
    const double span =
        full ? n : static_cast<double>(std::min(p, t.window_patches));
    macs += 4.0 * n * d * d;                        // QKV + output
    macs += (t.gated_mlp ? 3.0 : 2.0) * n * d * f;  // MLP
    macs += 2.0 * n * span * d;                     // QK^T and AV
  }
  // Each merger: an MLP d*m^2 -> h -> o on each of the p / m^2 tokens (h =
  // d*m^2 for Qwen's, merger_hidden for Nemotron Omni's projector).
  const double in = d * static_cast<double>(t.merge_size * t.merge_size);
  const double h =
      t.merger_hidden > 0 ? static_cast<double>(t.merger_hidden) : in;
  const double tokens = pp / static_cast<double>(t.merge_size * t.merge_size);
  macs += static_cast<double>(t.mergers) * tokens *
          (in * h + h * static_cast<double>(t.out_hidden));
  return macs;
}

// A tower's depth, width and MLP width.
void expect_dims(
    const TowerDims& t, int64_t depth, int64_t hidden, int64_t intermediate) {
  SCOPED_TRACE(t.name);
  EXPECT_EQ(t.depth, depth);
  EXPECT_EQ(t.hidden, hidden);
  EXPECT_EQ(t.intermediate, intermediate);
}

TEST(TowerPreset, HuggingFaceDims) {
  const TowerDims& q2 = tower_preset("qwen2-vl");
  expect_dims(q2, 32, 1280, 5120);
  EXPECT_FALSE(q2.gated_mlp);
  const TowerDims& q25 = tower_preset("qwen2.5-vl");
  EXPECT_EQ(q25.intermediate, 3420);
  EXPECT_TRUE(q25.gated_mlp);
  EXPECT_EQ(q25.window_patches, 64);
  EXPECT_EQ(q25.full_attention_layers, (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_EQ(q25.full_layers(), 4);
  EXPECT_EQ(q25.window_layers(), 28);
  const TowerDims& q3 = tower_preset("qwen3-vl");
  expect_dims(q3, 27, 1152, 4304);
  EXPECT_EQ(q3.full_layers(), 27);
  EXPECT_EQ(q3.window_layers(), 0);
  const TowerDims& small = tower_preset("qwen3-vl-small");
  expect_dims(small, 24, 1024, 4096);
  const TowerDims& q35 = tower_preset("qwen3.5");
  expect_dims(q35, q3.depth, q3.hidden, q3.intermediate);
  // Mergers: the patch merger, plus Qwen3-VL's three DeepStack mergers; all
  // to transformers' default out_hidden_size.
  EXPECT_EQ(q2.mergers, 1);
  EXPECT_EQ(q25.mergers, 1);
  EXPECT_EQ(q3.mergers, 4);
  EXPECT_EQ(small.mergers, 4);
  EXPECT_EQ(q35.mergers, 1);
  for (const auto* t : {&q2, &q25, &q3, &small, &q35}) {
    EXPECT_EQ(t->merge_size, 2) << t->name;
    EXPECT_EQ(t->out_hidden, 3584) << t->name;
  }
  // Nemotron Omni's RADIO (RadioConfig's and the Omni config's defaults).
  const TowerDims& radio = tower_preset("radio");
  expect_dims(radio, 32, 1280, 5120);
  EXPECT_EQ(radio.prefix_tokens, 10);
  EXPECT_EQ(radio.merger_hidden, 4096);
  EXPECT_EQ(radio.out_hidden, 4096);
  EXPECT_EQ(
      tower_preset_names(),
      (std::vector<std::string>{
          "qwen2-vl",
          "qwen2.5-vl",
          "qwen3-vl",
          "qwen3-vl-small",
          "qwen3.5",
          "radio"}));
}

TEST(TowerPreset, UnknownNameListsPresets) {
  std::string m = error_of([] { tower_preset("qwen4"); });
  expect_contains(m, "frameshard::tower_preset: expected one of qwen2-vl, ");
  expect_contains(m, "qwen3.5");
  expect_contains(m, "got \"qwen4\"");
}

TEST(FlopCostModel, PresetAlphas) {
  // Blocks 27 * (2 * 1152 + 4304), 4 mergers (1152 * 4 + 3584) / 2, over 27.
  CostModel q3 = flop_cost_model(tower_preset("qwen3-vl"));
  const double q3_b = (27.0 * 6608 + 4.0 * 4096) / 27;
  EXPECT_EQ(q3.a, 1.0);
  EXPECT_DOUBLE_EQ(q3.b, q3_b);
  EXPECT_EQ(q3.c, 0.0);
  EXPECT_EQ(q3.window_coef, 0.0);
  EXPECT_DOUBLE_EQ(q3.effective_alpha(), q3_b);
  EXPECT_EQ(q3.label, "qwen3-vl FLOPs, alpha=7214.814815");
  EXPECT_DOUBLE_EQ(
      flop_cost_model(tower_preset("qwen3.5")).b, (27.0 * 6608 + 4096) / 27);
  EXPECT_EQ(flop_cost_model(tower_preset("qwen2-vl")).b, 7816.0);
  EXPECT_EQ(flop_cost_model(tower_preset("qwen3-vl-small")).b, 6784.0);

  CostModel q25 = flop_cost_model(tower_preset("qwen2.5-vl"));
  EXPECT_EQ(q25.b, 62608.0);
  EXPECT_EQ(q25.window_coef, 7.0);
  EXPECT_EQ(q25.window, 64);
  EXPECT_EQ(q25.effective_alpha(), 63056.0);
  // Below the window every layer attends over the whole frame.
  EXPECT_EQ(q25(32), 32.0 * 32 + 62608.0 * 32 + 7.0 * 32 * 32);
  EXPECT_EQ(q25(100), 100.0 * 100 + 62608.0 * 100 + 7.0 * 100 * 64);
  // Without mergers: the blocks alone (6608 per Qwen3-VL layer).
  TowerDims blocks = tower_preset("qwen3-vl");
  blocks.mergers = 0;
  EXPECT_EQ(flop_cost_model(blocks).b, 6608.0);
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
  custom.mergers = 2;
  custom.merge_size = 2;
  custom.out_hidden = 12;
  const CostModel m = flop_cost_model(custom);
  EXPECT_EQ(m.b, (6.0 * (16 + 30) + 2.0 * (8 * 4 + 12) / 2) / 2);
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
  t.full_attention_layers = {1};
  t.mergers = 1;  // a merger needs its output width
  m = error_of([&] { flop_cost_model(t); });
  expect_contains(m, "broken.mergers >= 0 and, with mergers, merge_size > 0");
  expect_contains(m, "got mergers=1, merge_size=2, out_hidden=0");
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
  // The FLOP count gives about 2.1x more linear work (1.9x without the
  // mergers).
  EXPECT_NEAR(flop_cost_model(tower_preset("qwen3-vl")).b / m.b, 2.088, 0.001);
}

TEST(ParseCostAlpha, AutoCountsTheRunningTower) {
  // A tiny Qwen3-VL of the tests' size: the planner must cost it, not the
  // released tower the `tower` preset names.
  TowerDims tiny;
  tiny.name = "qwen3-vl";
  tiny.depth = 4;
  tiny.hidden = 256;
  tiny.intermediate = 1024;
  tiny.mergers = 4;
  tiny.out_hidden = 512;
  CostModel m = parse_cost_alpha("auto", tiny);
  const double b = (4.0 * (2 * 256 + 1024) + 4.0 * (256 * 4 + 512) / 2) / 4;
  EXPECT_DOUBLE_EQ(m.b, b);
  EXPECT_EQ(
      m.label,
      "auto (qwen3-vl depth 4, width 256, mlp 1024, 4 mergers to 512 FLOPs, "
      "alpha=2304)");
  EXPECT_EQ(parse_cost_alpha("automodel", tiny).b, 768.0);
  // Any other spec reads as it always does.
  EXPECT_EQ(parse_cost_alpha("512", tiny).b, 512.0);
  EXPECT_EQ(parse_cost_alpha("qwen2-vl", tiny).b, 7816.0);
  EXPECT_EQ(
      parse_cost_alpha("automodel:qwen3-vl", tiny).label,
      "automodel:qwen3-vl (3*hidden=3456)");
  EXPECT_EQ(
      tiny.describe(),
      "qwen3-vl depth 4, width 256, mlp 1024, 4 mergers to 512");
  tiny.gated_mlp = true;
  tiny.window_patches = 64;
  tiny.full_attention_layers = {3};
  tiny.mergers = 1;
  EXPECT_EQ(
      tiny.describe(),
      "qwen3-vl depth 4, width 256, gated mlp 1024, 64-patch windows, 1 "
      "full-attention layers, 1 merger to 512");
}

TEST(ParseCostAlpha, AcceptedSpecs) {
  CostModel m = parse_cost_alpha("auto");
  EXPECT_DOUBLE_EQ(m.b, (27.0 * 6608 + 4.0 * 4096) / 27);
  EXPECT_EQ(m.label, "auto (qwen3-vl FLOPs, alpha=7214.814815)");
  EXPECT_EQ(parse_cost_alpha("auto", "qwen2-vl").b, 7816.0);
  EXPECT_EQ(
      parse_cost_alpha("auto", "qwen2-vl").label,
      "auto (qwen2-vl FLOPs, alpha=7816)");

  m = parse_cost_alpha("512");
  EXPECT_EQ(m.b, 512.0);
  EXPECT_EQ(m.a, 1.0);
  EXPECT_EQ(m.label, "alpha=512");
  EXPECT_EQ(parse_cost_alpha("0").b, 0.0);

  m = parse_cost_alpha("qwen2.5-vl");
  EXPECT_EQ(m.b, 62608.0);
  EXPECT_EQ(m.window_coef, 7.0);
  EXPECT_EQ(m.window, 64);
  EXPECT_EQ(m.effective_alpha(), 63056.0);
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
