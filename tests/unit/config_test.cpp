// The YAML config: schema, strict validation (prior-art.md section 1.1),
// dotted overrides, round trip and plan options.
#include <frameshard/config.h>
#include <frameshard/error.h>

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/temp_file.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

const std::string kFs = "distributed.multimodal.vision.frame_sharding";

// A document that sets one frame-sharding field to `value` (YAML text).
std::string fs_doc(const std::string& field, const std::string& value) {
  return "distributed:\n"
         "  cp_size: 2\n"
         "  multimodal:\n"
         "    vision:\n"
         "      frame_sharding:\n"
         "        " +
         field + ": " + value + "\n";
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.cp_size, b.cp_size);
  EXPECT_EQ(a.dp_size, b.dp_size);
  EXPECT_EQ(a.tp_size, b.tp_size);
  const auto& x = a.frame_sharding;
  const auto& y = b.frame_sharding;
  EXPECT_EQ(x.enabled, y.enabled);
  EXPECT_EQ(x.mesh_dims, y.mesh_dims);
  EXPECT_EQ(x.min_tokens, y.min_tokens);
  EXPECT_EQ(x.min_frames, y.min_frames);
  EXPECT_EQ(x.min_local_patch_rows, y.min_local_patch_rows);
  EXPECT_EQ(x.cost_alpha, y.cost_alpha);
  EXPECT_EQ(x.partitioner, y.partitioner);
  EXPECT_EQ(x.split_frames, y.split_frames);
  EXPECT_EQ(x.split_exchange_cost, y.split_exchange_cost);
  EXPECT_EQ(x.split_min_gain, y.split_min_gain);
  EXPECT_EQ(x.split_exchange_latency_us, y.split_exchange_latency_us);
  EXPECT_EQ(x.gather, y.gather);
  EXPECT_EQ(x.tower, y.tower);
  EXPECT_EQ(x.policy, y.policy);
  EXPECT_DOUBLE_EQ(x.gather_bandwidth_gbps, y.gather_bandwidth_gbps);
  EXPECT_EQ(x.dedup, y.dedup);
  EXPECT_EQ(x.mesh_min_gain, y.mesh_min_gain);
}

// ---------------------------------------------------------------- defaults

TEST(Config, EmptyAndNullDocumentsGiveDefaults) {
  for (const std::string doc :
       {"",
        "~",
        "null",
        "# only a comment\n",
        "distributed:\n",
        "distributed:\n  multimodal:\n"}) {
    SCOPED_TRACE(doc);
    const Config c = parse_config(doc);
    expect_same(c, Config{});
  }
  const Config d;
  EXPECT_FALSE(d.frame_sharding.enabled);
  EXPECT_EQ(d.frame_sharding.mesh_dims, std::vector<std::string>{"cp"});
  EXPECT_EQ(d.frame_sharding.min_tokens, 2048);
  EXPECT_EQ(d.frame_sharding.min_frames, 32);
  EXPECT_EQ(d.frame_sharding.min_local_patch_rows, 96);
  EXPECT_EQ(d.frame_sharding.cost_alpha, "auto");
  EXPECT_EQ(d.frame_sharding.partitioner, "optimal");
}

TEST(Config, SeedExample) {
  const Config c = parse_config(
      "distributed:\n"
      "  cp_size: 2\n"
      "  multimodal:\n"
      "    vision:\n"
      "      frame_sharding:\n"
      "        enabled: true\n"
      "        mesh_dims: [cp]\n"
      "        min_tokens: 2048\n"
      "        min_frames: 32\n"
      "        min_local_patch_rows: 96\n"
      "        cost_alpha: auto\n");
  EXPECT_EQ(c.cp_size, 2);
  EXPECT_TRUE(c.frame_sharding.enabled);
  EXPECT_EQ(c.frame_sharding.cost_alpha, "auto");
}

TEST(Config, AllFields) {
  const Config c = parse_config(
      "distributed:\n"
      "  cp_size: 8\n"
      "  dp_size: 3\n"
      "  tp_size: 2\n"
      "  multimodal:\n"
      "    vision:\n"
      "      frame_sharding:\n"
      "        enabled: True\n"
      "        mesh_dims:\n"
      "          - cp\n"
      "        min_tokens: 0\n"
      "        min_frames: 7\n"
      "        min_local_patch_rows: 0\n"
      "        cost_alpha: 3456\n"
      "        partitioner: lpt\n"
      "        tower: qwen2.5-vl\n");
  EXPECT_EQ(c.cp_size, 8);
  EXPECT_EQ(c.dp_size, 3);
  EXPECT_EQ(c.tp_size, 2);
  EXPECT_TRUE(c.frame_sharding.enabled);
  EXPECT_EQ(c.frame_sharding.min_tokens, 0);
  EXPECT_EQ(c.frame_sharding.min_frames, 7);
  EXPECT_EQ(c.frame_sharding.min_local_patch_rows, 0);
  EXPECT_EQ(c.frame_sharding.cost_alpha, "3456");
  EXPECT_EQ(c.frame_sharding.partitioner, "lpt");
  EXPECT_EQ(c.frame_sharding.tower, "qwen2.5-vl");
}

TEST(Config, CostAlphaSpellings) {
  const std::vector<std::pair<std::string, std::string>> ok = {
      {"0", "0"},
      {"6608", "6608"},
      {"auto", "auto"},
      {"\"auto\"", "auto"},
      {"~", "auto"},  // Automodel's legacy None alias
      {"", "auto"},
      {"qwen2.5-vl", "qwen2.5-vl"},
      {"automodel", "automodel"},
      {"automodel:qwen2-vl", "automodel:qwen2-vl"},
      {"\"quadratic:1,2.5,3\"", "quadratic:1,2.5,3"},
  };
  for (const auto& [yaml, stored] : ok) {
    SCOPED_TRACE(yaml);
    EXPECT_EQ(
        parse_config(fs_doc("cost_alpha", yaml)).frame_sharding.cost_alpha,
        stored);
  }
}

// -------------------------------------------------------------- rejections

// How the config's errors render a YAML value: the text as written, or null
// for an empty one.
std::string got_value(const std::string& value) {
  return "got " + (value.empty() ? std::string("null") : value);
}

// Values of one field that fail with one "expected ..." text.
struct Rejected {
  std::string field;
  std::string expected;             // part of "expected ..."
  std::vector<std::string> values;  // YAML text
};

TEST(Config, RejectsBadFieldValues) {
  const std::vector<Rejected> cases = {
      {"enabled", "expected a bool (true or false)", {"yes"}},
      {"enabled", "expected a bool", {"1", "\"true\"", "[true]", ""}},
      {"mesh_dims",
       "expected a list of mesh-dimension names",
       {"cp", "\"cp\""}},
      {"mesh_dims",
       "expected [cp] or [dp, cp]",
       {"[cp, tp]", "[tp]", "[]", "[cp, dp]"}},
      {"cost_alpha",
       "expected a non-negative integer, auto",
       {"AUTO", "-1", "true", "1.5", "\"96\""}},
      {"cost_alpha", "automodel:<preset>", {"automodel:nope"}},
      {"cost_alpha", "quadratic:a,b,c", {"quadratic:1,2"}},
      {"cost_alpha", "expected a non-negative integer", {"[1]"}},
      {"partitioner", "expected one of optimal, greedy, count, lpt", {"best"}},
      {"partitioner", "expected one of optimal", {"Optimal", "{a: 1}"}},
      {"tower", "expected a tower preset (", {"qwen4"}},
  };
  for (const auto& c : cases) {
    for (const std::string& value : c.values) {
      SCOPED_TRACE(c.field + ": " + value);
      const std::string msg =
          error_of([&] { parse_config(fs_doc(c.field, value)); });
      expect_contains(msg, "frameshard::config: " + kFs + "." + c.field + ": ");
      expect_contains(msg, c.expected);
      expect_contains(msg, got_value(value));
    }
  }
}

TEST(Config, RejectsBadIntegers) {
  // prior-art.md 1.1: bools, floats, quoted strings and negatives.
  for (const std::string field :
       {"min_tokens", "min_frames", "min_local_patch_rows"}) {
    for (const std::string value :
         {"true",
          "false",
          "1.5",
          "\"96\"",
          "-1",
          "1e3",
          "0x10",
          "99999999999999999999",
          "[96]",
          ""}) {
      SCOPED_TRACE(field + ": " + value);
      const std::string msg =
          error_of([&] { parse_config(fs_doc(field, value)); });
      EXPECT_EQ(
          msg.substr(0, msg.find(" (in")),
          "frameshard::config: " + kFs + "." + field +
              ": expected a non-negative integer, " + got_value(value));
    }
  }
  for (const std::string field : {"cp_size", "dp_size", "tp_size"}) {
    for (const std::string value : {"0", "-2", "true", "2.0", "\"4\""}) {
      SCOPED_TRACE(field + ": " + value);
      const std::string msg = error_of(
          [&] { parse_config("distributed:\n  " + field + ": " + value); });
      expect_contains(
          msg,
          "frameshard::config: distributed." + field +
              ": expected a positive integer, got " + value);
    }
  }
}

TEST(Config, RejectsUnknownKeysWithFullPathAndAllowedKeys) {
  std::string msg = error_of([] { parse_config("model: qwen\n"); });
  expect_contains(msg, "frameshard::config: model: expected a known key");
  expect_contains(msg, "(distributed)");
  expect_contains(msg, "got unknown key model");

  msg = error_of([] { parse_config("distributed:\n  pp_size: 2\n"); });
  expect_contains(msg, "frameshard::config: distributed.pp_size: ");
  expect_contains(msg, "cp_size, dp_size, tp_size, multimodal");

  msg = error_of([] { parse_config(fs_doc("min_token", "10")); });
  expect_contains(msg, "frameshard::config: " + kFs + ".min_token: ");
  expect_contains(
      msg,
      "(enabled, mesh_dims, min_tokens, min_frames, min_local_patch_rows, "
      "cost_alpha, partitioner, gather, split_frames, split_exchange_cost, "
      "split_min_gain, split_exchange_latency_us, tower, policy, "
      "gather_bandwidth_gbps, dedup, mesh_min_gain)");

  msg = error_of(
      [] { parse_config("distributed:\n  multimodal:\n    audio: {}\n"); });
  expect_contains(msg, "distributed.multimodal.audio: ");
  expect_contains(msg, "(vision)");
}

TEST(Config, FrameShardingKeysAreTheSchemasKeysInDeclarationOrder) {
  const std::vector<std::string> keys = frame_sharding_keys();
  EXPECT_EQ(
      keys,
      (std::vector<std::string>{
          "enabled",
          "mesh_dims",
          "min_tokens",
          "min_frames",
          "min_local_patch_rows",
          "cost_alpha",
          "partitioner",
          "gather",
          "split_frames",
          "split_exchange_cost",
          "split_min_gain",
          "split_exchange_latency_us",
          "tower",
          "policy",
          "gather_bandwidth_gbps",
          "dedup",
          "mesh_min_gain"}));
  // Each one is a key an override accepts (the schema, not a second list).
  for (const std::string& key : keys) {
    Config c;
    const std::string msg = error_of(
        [&] { apply_override(c, kFs + "." + key, "[not, a, value]"); });
    expect_contains(msg, kFs + "." + key + ": expected ");
    EXPECT_EQ(msg.find("unknown key"), std::string::npos) << msg;
  }
}

TEST(Config, OtherSectionsAreSkippedAndListedAmongTheKnownKeys) {
  const std::string doc =
      "model: {anything: [1, 2]}\n"
      "distributed:\n  cp_size: 4\n"
      "data: 3\n";
  const Config c = parse_config(doc, "recipe.yaml", {"model", "data"});
  EXPECT_EQ(c.cp_size, 4);
  // Without them the keys are unknown, as before.
  expect_contains(
      error_of([&] { parse_config(doc, "recipe.yaml"); }),
      "model: expected a known key under the top level (distributed)");
  const std::string msg = error_of([&] {
    parse_config("optim: {}\n", "recipe.yaml", {"model", "data"});
  });
  expect_contains(
      msg,
      "frameshard::config: optim: expected a known key under the top level "
      "(distributed, model, data), got unknown key optim (in recipe.yaml:1)");
  // Skipped sections still follow the document rules (each key once).
  expect_contains(
      error_of([&] { parse_config("model: {}\nmodel: {}\n", "", {"model"}); }),
      "model: expected each key once, got a duplicate key");
}

TEST(Config, RejectsFlatLegacyKey) {
  const std::string msg = error_of([] {
    parse_config(
        "distributed:\n"
        "  cp_vision_frame_sharding:\n"
        "    enabled: true\n");
  });
  expect_contains(
      msg, "frameshard::config: distributed.cp_vision_frame_sharding: ");
  expect_contains(msg, "expected the nested section " + kFs);
  expect_contains(msg, "got the flat legacy key");
}

TEST(Config, RejectsNonMappings) {
  expect_contains(
      error_of([] { parse_config("distributed: 3\n"); }),
      "frameshard::config: distributed: expected a mapping, got 3");
  expect_contains(
      error_of([] { parse_config("distributed: [cp]\n"); }),
      "frameshard::config: distributed: expected a mapping, got [cp]");
  expect_contains(
      error_of([] { parse_config("distributed:\n  multimodal: true\n"); }),
      "distributed.multimodal: expected a mapping, got true");
  expect_contains(
      error_of([] { parse_config("- a\n- b\n"); }),
      "frameshard::config: (top level): expected a mapping, got [a, b]");
  expect_contains(
      error_of([] { parse_config("just a string"); }),
      "(top level): expected a mapping, got just a string");
}

TEST(Config, RejectsDuplicateAndDottedKeys) {
  expect_contains(
      error_of(
          [] { parse_config("distributed:\n  cp_size: 2\n  cp_size: 4\n"); }),
      "distributed.cp_size: expected each key once, got a duplicate key");
  expect_contains(
      error_of([] { parse_config("distributed.cp_size: 2\n"); }),
      "distributed.cp_size: expected a plain key");
}

TEST(Config, SyntaxErrorNamesFileAndLine) {
  const std::string msg = error_of([] {
    parse_config("distributed:\n  cp_size: [2\n  dp_size: 1\n", "train.yaml");
  });
  expect_contains(msg, "frameshard::config: train.yaml:");
  expect_contains(msg, "expected valid YAML");
}

TEST(Config, FieldErrorsNameTheSourceLine) {
  const std::string msg = error_of(
      [] { parse_config(fs_doc("min_frames", "true"), "train.yaml"); });
  expect_contains(
      msg, kFs + ".min_frames: expected a non-negative integer, got true");
  expect_contains(msg, "(in train.yaml:6)");
}

// ----------------------------------------------------------------- files

TEST(Config, LoadConfigReadsFileAndReportsMissingPath) {
  const testing::TempFile file(fs_doc("enabled", "true"));
  const Config c = load_config(file.path());
  EXPECT_TRUE(c.frame_sharding.enabled);
  EXPECT_EQ(c.cp_size, 2);
  file.write("distributed:\n  cp_size: 2\n  cp_size: [\n");
  expect_contains(
      error_of([&] { load_config(file.path()); }), file.path() + ":");

  const std::string missing = "/nonexistent/frameshard/train.yaml";
  const std::string msg = error_of([&] { load_config(missing); });
  expect_contains(msg, "frameshard::config: ");
  expect_contains(msg, missing);
}

// ------------------------------------------------------------- round trip

TEST(Config, ToYamlRoundTrips) {
  std::vector<Config> configs(4);
  configs[1].cp_size = 8;
  configs[1].dp_size = 2;
  configs[1].tp_size = 4;
  configs[1].frame_sharding.enabled = true;
  configs[1].frame_sharding.min_tokens = 0;
  configs[1].frame_sharding.min_frames = 5;
  configs[1].frame_sharding.min_local_patch_rows = 0;
  configs[1].frame_sharding.cost_alpha = "3456";
  configs[1].frame_sharding.partitioner = "lpt";
  configs[1].frame_sharding.tower = "qwen2-vl";
  configs[1].frame_sharding.gather = "owner";
  configs[3].frame_sharding.split_frames = true;
  configs[3].frame_sharding.split_exchange_cost = 0;
  configs[3].frame_sharding.split_min_gain = 0.125;
  configs[2].frame_sharding.split_min_gain = 0.1;  // not exact in binary
  configs[2].frame_sharding.mesh_min_gain = 0.3;   // nor this
  configs[2].frame_sharding.cost_alpha = "quadratic:1,2.5,0";
  configs[2].frame_sharding.partitioner = "count";
  configs[3].frame_sharding.cost_alpha = "automodel:qwen3.5";
  for (const Config& c : configs) {
    const std::string text = to_yaml(c);
    SCOPED_TRACE(text);
    expect_same(parse_config(text), c);
    EXPECT_EQ(to_yaml(parse_config(text)), text);
  }
  // An integer alpha is written as an integer, not a quoted string.
  expect_contains(to_yaml(configs[1]), "cost_alpha: 3456\n");
  expect_contains(to_yaml(configs[1]), "enabled: true\n");
  expect_contains(to_yaml(configs[0]), "mesh_dims: [cp]\n");
}

// -------------------------------------------------------------- overrides

TEST(Config, OverridesUseDottedKeys) {
  Config c = parse_config(fs_doc("enabled", "true"));
  apply_override(c, kFs + ".enabled", "false");
  EXPECT_FALSE(c.frame_sharding.enabled);
  apply_override(c, kFs + ".min_tokens", "0");
  EXPECT_EQ(c.frame_sharding.min_tokens, 0);
  apply_override(c, kFs + ".mesh_dims", "[dp, cp]");
  EXPECT_EQ(c.frame_sharding.mesh_dims, (std::vector<std::string>{"dp", "cp"}));
  apply_override(c, kFs + ".mesh_dims", "[cp]");
  apply_override(c, kFs + ".cost_alpha", "6608");
  EXPECT_EQ(c.frame_sharding.cost_alpha, "6608");
  apply_override(c, kFs + ".cost_alpha", "quadratic:1,0,0");
  EXPECT_EQ(c.frame_sharding.cost_alpha, "quadratic:1,0,0");
  apply_override(c, kFs + ".partitioner", "greedy");
  EXPECT_EQ(c.frame_sharding.partitioner, "greedy");
  apply_override(c, "distributed.cp_size", "16");
  EXPECT_EQ(c.cp_size, 16);
  // A whole section, as a YAML flow mapping.
  apply_override(c, kFs, "{enabled: true, min_frames: 4}");
  EXPECT_TRUE(c.frame_sharding.enabled);
  EXPECT_EQ(c.frame_sharding.min_frames, 4);
  EXPECT_EQ(c.frame_sharding.min_tokens, 0);  // untouched
}

TEST(Config, GatherIsAllOrOwner) {
  EXPECT_EQ(
      parse_config(fs_doc("gather", "owner")).frame_sharding.gather, "owner");
  EXPECT_EQ(Config{}.frame_sharding.gather, "all");
  try {
    parse_config(fs_doc("gather", "ring"));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    expect_contains(e.what(), kFs + ".gather: expected all or owner, got ring");
  }
  Config c;
  apply_override(c, kFs + ".gather", "owner");
  EXPECT_EQ(c.frame_sharding.gather, "owner");
  c.frame_sharding.gather = "some";
  EXPECT_THROW(validate(c), Error);
}

TEST(Config, OverrideErrorsMatchFileErrors) {
  // One validation path: the override reports exactly what the file does.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"min_tokens", "true"},
      {"min_frames", "-1"},
      {"enabled", "yes"},
      {"mesh_dims", "cp"},
      {"mesh_dims", "[cp, tp]"},
      {"cost_alpha", "AUTO"},
      {"cost_alpha", "1.5"},
      {"partitioner", "fastest"},
      {"min_local_patch_rows", "\"96\""},
  };
  for (const auto& [field, value] : cases) {
    SCOPED_TRACE(field + "=" + value);
    Config c;
    const std::string from_override =
        error_of([&] { apply_override(c, kFs + "." + field, value); });
    const std::string from_file =
        error_of([&] { parse_config(fs_doc(field, value)); });
    EXPECT_FALSE(from_override.empty());
    EXPECT_EQ(from_override, from_file);
  }
}

TEST(Config, BadOverrideLeavesConfigUnchanged) {
  Config c;
  c.frame_sharding.min_frames = 7;
  error_of([&] { apply_override(c, kFs, "{min_frames: 3, min_tokens: -5}"); });
  EXPECT_EQ(c.frame_sharding.min_frames, 7);
  EXPECT_EQ(c.frame_sharding.min_tokens, 2048);
}

TEST(Config, OverrideRejectsUnknownKeys) {
  Config c;
  std::string msg =
      error_of([&] { apply_override(c, kFs + ".enable", "true"); });
  expect_contains(msg, "frameshard::config: " + kFs + ".enable: ");
  expect_contains(msg, "(enabled, mesh_dims,");
  msg = error_of([&] { apply_override(c, "distrib.cp_size", "2"); });
  expect_contains(msg, "frameshard::config: distrib: ");
  msg = error_of([&] { apply_override(c, "distributed.cp_size.x", "2"); });
  expect_contains(msg, "distributed.cp_size.x: expected a key that ends");
  msg = error_of(
      [&] { apply_override(c, "distributed.cp_vision_frame_sharding", "{}"); });
  expect_contains(msg, "flat legacy key");
  msg = error_of([&] { apply_override(c, "", "1"); });
  expect_contains(msg, "expected a dotted key");
  msg = error_of([&] { apply_override(c, "distributed..cp_size", "1"); });
  expect_contains(msg, "expected a dotted key");
  msg = error_of([&] { apply_override(c, "distributed.cp_size", "[1"); });
  expect_contains(msg, "distributed.cp_size: expected a YAML value");
}

// ------------------------------------------------------------- validate

TEST(Config, ValidateChecksValuesSetFromCode) {
  auto msg_for = [](auto mutate) {
    Config c;
    mutate(c);
    return error_of([&] { validate(c); });
  };
  expect_contains(
      msg_for([](Config& c) { c.cp_size = 0; }),
      "distributed.cp_size: expected a positive integer, got 0");
  expect_contains(
      msg_for([](Config& c) { c.frame_sharding.min_tokens = -3; }),
      kFs + ".min_tokens: expected a non-negative integer, got -3");
  expect_contains(
      msg_for([](Config& c) {
        c.frame_sharding.mesh_dims = {"cp", "tp"};
      }),
      kFs + ".mesh_dims: expected [cp] or [dp, cp], got [cp, tp]");
  expect_contains(
      msg_for([](Config& c) { c.frame_sharding.partitioner = "x"; }),
      kFs + ".partitioner: expected one of");
  expect_contains(
      msg_for([](Config& c) { c.frame_sharding.cost_alpha = "AUTO"; }),
      kFs + ".cost_alpha: expected a non-negative integer");
  expect_contains(
      msg_for([](Config& c) { c.frame_sharding.cost_alpha = "-1"; }),
      kFs + ".cost_alpha: expected a non-negative integer");
  expect_contains(
      msg_for([](Config& c) { c.frame_sharding.tower = "x"; }),
      kFs + ".tower: expected a tower preset");
  validate(Config{});  // defaults are valid
}

// ---------------------------------------------------------- plan options

TEST(Config, AutoPolicyKeys) {
  Config c = parse_config(fs_doc("policy", "auto"));
  EXPECT_EQ(c.frame_sharding.policy, "auto");
  EXPECT_DOUBLE_EQ(c.frame_sharding.gather_bandwidth_gbps, 25.0);
  c = parse_config(fs_doc("gather_bandwidth_gbps", "12.5"));
  EXPECT_EQ(c.frame_sharding.policy, "threshold");
  EXPECT_DOUBLE_EQ(c.frame_sharding.gather_bandwidth_gbps, 12.5);
  for (const auto& [field, value, expected] :
       std::vector<std::array<std::string, 3>>{
           {"policy", "always", "expected threshold or auto, got always"},
           {"policy", "[auto]", "expected threshold or auto, got [auto]"},
           {"gather_bandwidth_gbps", "0", "expected a number > 0, got 0"},
           {"gather_bandwidth_gbps", "-3", "expected a number > 0, got -3"},
           {"gather_bandwidth_gbps", "fast", "expected a number > 0, got fast"},
           {"gather_bandwidth_gbps",
            "\"25\"",
            "expected a number > 0, got \"25\""},
           {"gather_bandwidth_gbps", ".inf", "expected a number > 0"}}) {
    SCOPED_TRACE(value);
    expect_contains(
        error_of([&] { parse_config(fs_doc(field, value)); }),
        kFs + "." + field + ": " + expected);
  }
  c.frame_sharding.policy = "auto";
  c.frame_sharding.gather_bandwidth_gbps = 12.5;
  expect_same(c, parse_config(to_yaml(c)));
  const PlanOptions o = plan_options(c);
  EXPECT_EQ(o.policy.kind, PolicyKind::kAuto);
  EXPECT_DOUBLE_EQ(o.policy.gather_bandwidth_gbps, 12.5);
  // A bare alpha takes the tower's FLOP units for the auto policy.
  c.frame_sharding.cost_alpha = "100";
  EXPECT_DOUBLE_EQ(
      plan_options(c).cost.seconds_per_unit,
      flop_cost_model(tower_preset("qwen3-vl")).seconds_per_unit);
  c.frame_sharding.gather_bandwidth_gbps = 0.0;
  expect_contains(
      error_of([&] { validate(c); }),
      kFs + ".gather_bandwidth_gbps: expected a number > 0, got 0");
}

TEST(Config, PlanOptionsFollowTheConfig) {
  Config c;
  c.cp_size = 4;
  c.frame_sharding.enabled = true;
  c.frame_sharding.min_tokens = 10;
  c.frame_sharding.min_frames = 3;
  c.frame_sharding.min_local_patch_rows = 0;
  c.frame_sharding.partitioner = "lpt";
  c.frame_sharding.cost_alpha = "100";
  const PlanOptions o = plan_options(c);
  EXPECT_EQ(o.world, 4);
  EXPECT_EQ(o.partitioner, Partitioner::kLpt);
  EXPECT_EQ(o.min_local_patch_rows, 0);
  EXPECT_TRUE(o.policy.enabled);
  EXPECT_EQ(o.policy.min_tokens, 10);
  EXPECT_EQ(o.policy.min_frames, 3);
  EXPECT_DOUBLE_EQ(o.cost(10), 10.0 * (10 + 100));

  // "auto" follows the configured tower.
  c.frame_sharding.cost_alpha = "auto";
  c.frame_sharding.tower = "qwen2-vl";
  const CostModel expect = parse_cost_alpha("auto", "qwen2-vl");
  EXPECT_DOUBLE_EQ(plan_options(c).cost(1000), expect(1000));
  c.frame_sharding.tower = "qwen3-vl";
  EXPECT_NE(plan_options(c).cost(1000), expect(1000));

  const PlanOptions d = plan_options(Config{});
  EXPECT_EQ(d.world, 1);
  EXPECT_FALSE(d.policy.enabled);
  EXPECT_EQ(d.partitioner, Partitioner::kOptimal);
  EXPECT_EQ(d.min_local_patch_rows, 96);
}

}  // namespace
}  // namespace frameshard
