// The training recipe (frameshard/train/train_config.h): the embedded
// default and the example recipes, the model/data/train schema and its
// errors, overrides, and the plan options of the two arms (Megatron
// Bridge's vision_dp_over_cp included).
#include <frameshard/config.h>
#include <frameshard/plan.h>
#include <frameshard/train/data_batch.h>
#include <frameshard/train/train_config.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace train {
namespace {

using frameshard::testing::error_of;
using frameshard::testing::expect_contains;

const std::string kFs = "distributed.multimodal.vision.frame_sharding";

// Every field, so a field that to_yaml drops or parse ignores shows up.
void expect_same(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(frameshard::to_yaml(a.parallel), frameshard::to_yaml(b.parallel));
  EXPECT_EQ(a.model.tower, b.model.tower);
  EXPECT_EQ(a.model.model_dir, b.model.model_dir);
  EXPECT_EQ(a.model.vision_depth, b.model.vision_depth);
  EXPECT_EQ(a.model.vision_hidden, b.model.vision_hidden);
  EXPECT_EQ(a.model.vision_heads, b.model.vision_heads);
  EXPECT_EQ(a.model.deepstack_layers, b.model.deepstack_layers);
  EXPECT_EQ(a.model.text_hidden, b.model.text_hidden);
  EXPECT_EQ(a.model.text_layers, b.model.text_layers);
  EXPECT_EQ(a.model.text_heads, b.model.text_heads);
  EXPECT_EQ(a.model.text_ffn, b.model.text_ffn);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.vision_dp_over_cp, b.model.vision_dp_over_cp);
  EXPECT_EQ(a.model.vision_checkpointing, b.model.vision_checkpointing);
  EXPECT_EQ(a.data.preset, b.data.preset);
  EXPECT_EQ(a.data.manifest, b.data.manifest);
  EXPECT_EQ(a.data.scale, b.data.scale);
  EXPECT_EQ(a.data.text_tokens, b.data.text_tokens);
  EXPECT_EQ(a.data.samples_per_step, b.data.samples_per_step);
  EXPECT_EQ(a.data.group_size, b.data.group_size);
  EXPECT_EQ(a.data.group_order, b.data.group_order);
  EXPECT_EQ(a.data.seed, b.data.seed);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.lr, b.train.lr);
  EXPECT_EQ(a.train.weight_decay, b.train.weight_decay);
  EXPECT_EQ(a.train.dtype, b.train.dtype);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.timeout_ms, b.train.timeout_ms);
}

std::string recipes_dir() {
  return std::string(FRAMESHARD_SOURCE_DIR) + "/examples/recipes";
}

// ---------------------------------------------------------------- defaults

TEST(Recipe, EmbeddedDefaultIsCp2MixedWithShardingOn) {
  const TrainConfig d = default_train_config();
  EXPECT_EQ(d.parallel.cp_size, 2);
  EXPECT_TRUE(d.parallel.frame_sharding.enabled);
  EXPECT_EQ(d.parallel.frame_sharding.tower, "qwen3-vl");
  EXPECT_EQ(d.model.tower, "qwen3-vl");
  EXPECT_EQ(d.data.preset, "mixed");
  EXPECT_EQ(d.data.scale, 6);
  EXPECT_EQ(d.train.steps, 30);
  EXPECT_TRUE(d.data.manifest.empty());
  expect_same(d, parse_train_config(default_train_config_yaml()));
}

TEST(Recipe, DefaultsRoundTripThroughToYaml) {
  const TrainConfig d = default_train_config();
  expect_same(parse_train_config(to_yaml(d), "to_yaml"), d);
  expect_same(parse_train_config(to_yaml(TrainConfig{})), TrainConfig{});
}

TEST(Recipe, EveryFieldRoundTripsThroughToYaml) {
  TrainConfig c;
  c.parallel.cp_size = 4;
  c.parallel.frame_sharding.enabled = true;
  c.parallel.frame_sharding.partitioner = "lpt";
  c.parallel.frame_sharding.tower = "qwen2.5-vl";
  c.model = {
      "qwen2-vl",
      "dir with: colon #and 'quotes\"",
      3,
      96,
      3,
      0,
      32,
      1,
      2,
      48,
      300,
      true,
      true};
  c.data = {"video", "a b.jsonl", 2, 7, 9, 16, "contiguous", 11};
  c.train = {5, 0.1, 3e-5, "bfloat16", 13, 5000};
  const std::string text = to_yaml(c);
  expect_same(parse_train_config(text, "to_yaml"), c);
}

TEST(Recipe, EmptyDocumentGivesTheStructDefaults) {
  for (const std::string doc : {"", "~", "# nothing\n", "model:\n"}) {
    SCOPED_TRACE(doc);
    expect_same(parse_train_config(doc), TrainConfig{});
  }
}

TEST(Recipe, CostTowerFollowsTheModelTowerUnlessSet) {
  EXPECT_EQ(
      parse_train_config("model: {tower: qwen2.5-vl}\n")
          .parallel.frame_sharding.tower,
      "qwen2.5-vl");
  const std::string explicit_tower =
      "model: {tower: qwen2.5-vl}\n"
      "distributed: {multimodal: {vision: {frame_sharding: "
      "{tower: qwen3-vl-small}}}}\n";
  TrainConfig c = parse_train_config(explicit_tower);
  EXPECT_EQ(c.parallel.frame_sharding.tower, "qwen3-vl-small");
  // An override of model.tower carries a following cost tower, not a set one.
  apply_train_override(c, "model.tower", "qwen2-vl");
  EXPECT_EQ(c.parallel.frame_sharding.tower, "qwen3-vl-small");
  TrainConfig d = default_train_config();
  apply_train_override(d, "model.tower", "qwen2.5-vl");
  EXPECT_EQ(d.parallel.frame_sharding.tower, "qwen2.5-vl");
}

// ------------------------------------------------------- example recipes

TEST(Recipe, EveryExampleRecipeParsesAndMakesABatch) {
  int recipes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(recipes_dir())) {
    if (entry.path().extension() != ".yaml") {
      continue;
    }
    SCOPED_TRACE(entry.path().string());
    ++recipes;
    const TrainConfig c = load_train_config(entry.path().string());
    BatchRequest r;
    r.vocab_size = c.model.vocab_size;
    r.pad_multiple = 2 * c.parallel.cp_size;
    BatchLayout b;
    if (c.data.manifest.empty()) {
      b = synthetic_batch(c.data, MediaLayout{}, r);
    } else {
      const auto samples = load_manifest(c.data.manifest, MediaLayout{});
      r.dp_size = c.parallel.dp_size;
      b = manifest_batch(samples, c.data, MediaLayout{}, r);
    }
    EXPECT_GT(b.media_tokens, 0);
    EXPECT_EQ(b.seq_len() % r.pad_multiple, 0);
  }
  EXPECT_GE(recipes, 6);  // four presets, Megatron, the manifest recipe
}

TEST(Recipe, MegatronExampleRecipeSetsTheSwitch) {
  const TrainConfig c =
      load_train_config(recipes_dir() + "/megatron_vision_dp_over_cp.yaml");
  EXPECT_TRUE(c.model.vision_dp_over_cp);
  EXPECT_EQ(c.parallel.cp_size, 2);
  EXPECT_EQ(arm_plan_options(c, true).partitioner, Partitioner::kCount);
}

TEST(Recipe, LoadTrainConfigResolvesPathsAgainstTheRecipeAndNamesMissingFiles) {
  const std::string dir = ::testing::TempDir() + "frameshard_recipe_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/r.yaml";
  {
    std::ofstream out(path);
    out << "data:\n  manifest: shapes.jsonl\nmodel:\n  model_dir: /abs/ckpt\n";
  }
  const TrainConfig c = load_train_config(path);
  EXPECT_EQ(c.data.manifest, dir + "/shapes.jsonl");
  EXPECT_EQ(c.model.model_dir, "/abs/ckpt");
  {
    std::ofstream out(path);
    out << "model:\n  text_layers: -2\n";
  }
  expect_contains(
      error_of([&] { load_train_config(path); }),
      "frameshard::config: model.text_layers: expected a positive integer, "
      "got -2 (in " +
          path + ":2)");
  std::filesystem::remove_all(dir);
  const std::string missing = "/nonexistent/frameshard/recipe.yaml";
  expect_contains(
      error_of([&] { load_train_config(missing); }),
      "frameshard::config: expected a readable YAML recipe, got " + missing);
}

// ----------------------------------------------------------------- errors

TEST(Recipe, UnknownModelKeyIsRejectedWithItsPathAndTheKnownKeys) {
  const std::string msg = error_of(
      [] { parse_train_config("model:\n  text_layer: 2\n", "r.yaml"); });
  expect_contains(
      msg,
      "frameshard::config: model.text_layer: expected a known key under "
      "model (tower, model_dir, vision_depth, vision_hidden, vision_heads, "
      "deepstack_layers, text_hidden, text_layers, text_heads, text_ffn, "
      "vocab_size, vision_dp_over_cp, vision_checkpointing), got unknown key "
      "text_layer (in r.yaml:2)");
  expect_contains(
      error_of([] { parse_train_config("data: {shuffle: true}\n"); }),
      "data.shuffle: expected a known key under data (preset, manifest, "
      "scale, text_tokens, samples_per_step, group_size, group_order, "
      "seed)");
  expect_contains(
      error_of([] { parse_train_config("train: {epochs: 1}\n"); }),
      "train.epochs: expected a known key under train (steps, lr, "
      "weight_decay, dtype, seed, timeout_ms)");
}

TEST(Recipe, UnknownTopLevelKeyListsEverySection) {
  expect_contains(
      error_of([] { parse_train_config("optim:\n  lr: 1\n", "r.yaml"); }),
      "frameshard::config: optim: expected a known key under the top level "
      "(distributed, model, data, train), got unknown key optim (in r.yaml:1)");
}

TEST(Recipe, TypeErrorsNameThePathTheExpectationTheValueAndTheLine) {
  struct Case {
    std::string doc;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"model:\n  tower: qwen3-vl\n  text_layers: -2\n",
       "model.text_layers: expected a positive integer, got -2 (in r.yaml:3)"},
      {"model: {vision_hidden: 1.5}\n",
       "model.vision_hidden: expected a positive integer, got 1.5"},
      {"model: {tower: qwen4}\n",
       "model.tower: expected one of qwen2-vl, qwen2.5-vl, qwen3-vl, radio, "
       "got "
       "qwen4"},
      {"model: {vision_dp_over_cp: yes}\n",
       "model.vision_dp_over_cp: expected a bool (true or false), got yes"},
      {"model: {vocab_size: 2}\n",
       "model.vocab_size: expected an integer >= 3, got 2"},
      {"model: {model_dir: [a]}\n",
       "model.model_dir: expected a path (a string), got [a]"},
      {"data: {preset: movies}\n",
       "data.preset: expected one of doc, multi, video, mixed, grpo, got "
       "movies"},
      {"data: {scale: 0}\n", "data.scale: expected a positive integer, got 0"},
      {"data: {text_tokens: 0}\n",
       "data.text_tokens: expected a positive integer, got 0"},
      {"data: {seed: -1}\n",
       "data.seed: expected a non-negative integer, got -1"},
      {"train: {lr: true}\n", "train.lr: expected a number > 0, got true"},
      {"train: {lr: \"0.1\"}\n",
       "train.lr: expected a number > 0, got \"0.1\""},
      {"train: {lr: 0}\n", "train.lr: expected a number > 0, got 0"},
      {"train: {lr: .nan}\n", "train.lr: expected a number > 0, got .nan"},
      {"train: {weight_decay: -0.1}\n",
       "train.weight_decay: expected a number >= 0, got -0.1"},
      {"train: {dtype: fp16}\n",
       "train.dtype: expected one of float32, float64, bfloat16, got fp16"},
      {"train: {steps: many}\n",
       "train.steps: expected a positive integer, got many"},
      {"model: 3\n", "model: expected a mapping, got 3"},
      {"train: [1]\n", "train: expected a mapping, got [1]"},
      {"model:\n  text_layers: 2\n  text_layers: 3\n",
       "model.text_layers: expected each key once, got a duplicate key"},
      {"model:\n  text.layers: 2\n",
       "model.text.layers: expected a plain key (nest the sections instead "
       "of dotting them), got key text.layers"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.doc);
    expect_contains(
        error_of([&] { parse_train_config(c.doc, "r.yaml"); }),
        "frameshard::config: " + c.message);
  }
}

TEST(Recipe, DistributedErrorsAreWordedAsFrameshardConfigWordsThem) {
  for (const std::string doc :
       {"distributed:\n  cp_size: 0\n",
        "distributed:\n  multimodal:\n    vision:\n      frame_sharding:\n"
        "        min_tokens: true\n",
        "distributed:\n  pp_size: 2\n",
        "distributed:\n  cp_size: [2\n"}) {
    SCOPED_TRACE(doc);
    const std::string core = error_of([&] { parse_config(doc, "r.yaml"); });
    EXPECT_FALSE(core.empty());
    EXPECT_EQ(error_of([&] { parse_train_config(doc, "r.yaml"); }), core);
  }
}

TEST(Recipe, CrossFieldRulesNameTheField) {
  expect_contains(
      error_of([] { parse_train_config("model: {vision_heads: 3}\n"); }),
      "model.vision_heads: expected a divisor of model.vision_hidden (64) "
      "leaving a head size divisible by 4 (2-D rotary), got 3");
  expect_contains(
      error_of([] { parse_train_config("model: {vision_heads: 32}\n"); }),
      "model.vision_heads: expected a divisor");
  expect_contains(
      error_of([] { parse_train_config("model: {text_heads: 5}\n"); }),
      "model.text_heads: expected a divisor of model.text_hidden (64) "
      "leaving an even head size (rotary), got 5");
  expect_contains(
      error_of([] { parse_train_config("model: {deepstack_layers: 3}\n"); }),
      "model.deepstack_layers: expected at most model.vision_depth (2) for "
      "qwen3-vl, got 3");
  // Towers without DeepStack ignore the field.
  EXPECT_NO_THROW(
      parse_train_config("model: {tower: qwen2-vl, deepstack_layers: 3}\n"));
}

TEST(Recipe, ValidateChecksValuesSetFromCode) {
  TrainConfig c;
  c.train.lr = -1;
  expect_contains(
      error_of([&] { validate(c); }),
      "train.lr: expected a number > 0, got -1");
  c = TrainConfig{};
  c.model.tower = "qwen4";
  expect_contains(
      error_of([&] { validate(c); }),
      "model.tower: expected one of qwen2-vl, qwen2.5-vl, qwen3-vl, radio, got "
      "\"qwen4\"");
  c = TrainConfig{};
  c.model.text_layers = 0;
  expect_contains(
      error_of([&] { validate(c); }),
      "model.text_layers: expected a positive integer, got 0");
  c = TrainConfig{};
  c.parallel.cp_size = 0;
  expect_contains(error_of([&] { validate(c); }), "distributed.cp_size");
  EXPECT_NO_THROW(validate(TrainConfig{}));
}

// -------------------------------------------------------------- overrides

TEST(Recipe, OverridesReachEverySection) {
  TrainConfig c = default_train_config();
  apply_train_override(c, "model.text_layers", "3");
  apply_train_override(c, "model.vision_dp_over_cp", "true");
  apply_train_override(c, "data.preset", "video");
  apply_train_override(c, "data.manifest", "my shapes.jsonl");
  apply_train_override(c, "train.lr", "3e-4");
  apply_train_override(c, "train.steps", "6");
  apply_train_override(c, "distributed.cp_size", "4");
  apply_train_override(c, kFs + ".enabled", "false");
  EXPECT_EQ(c.model.text_layers, 3);
  EXPECT_TRUE(c.model.vision_dp_over_cp);
  EXPECT_EQ(c.data.preset, "video");
  EXPECT_EQ(c.data.manifest, "my shapes.jsonl");
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.steps, 6);
  EXPECT_EQ(c.parallel.cp_size, 4);
  EXPECT_FALSE(c.parallel.frame_sharding.enabled);
  apply_train_override(c, "model", "{text_layers: 1, text_heads: 2}");
  EXPECT_EQ(c.model.text_layers, 1);
  EXPECT_EQ(c.model.text_heads, 2);
}

TEST(Recipe, BadOverridesNameTheKeyAndLeaveTheConfigUnchanged) {
  struct Case {
    std::string key, value, message;
  };
  const std::vector<Case> cases = {
      {"model.text_layers",
       "x",
       "model.text_layers: expected a positive integer, got x"},
      {"model.text_layer",
       "2",
       "model.text_layer: expected a known key under model (tower,"},
      {"model.tower.name",
       "x",
       "model.tower.name: expected a key that ends at a value (model.tower "
       "has no sub-keys), got unknown key name"},
      {"optim.lr",
       "1",
       "optim: expected a known key under the top level (distributed, model, "
       "data, train), got unknown key optim"},
      {"", "1", "(override): expected a dotted key such as train.steps"},
      {"model.", "1", "model.: expected a dotted key such as train.steps"},
      {"train.lr", "[1", "train.lr: expected a YAML value, got \"[1\""},
      {"train.lr", "-1", "train.lr: expected a number > 0, got -1"},
      {"model.text_heads", "3", "model.text_heads: expected a divisor"},
      {"model", "{nope: 1}", "model.nope: expected a known key under model"},
  };
  const TrainConfig before = default_train_config();
  for (const Case& k : cases) {
    SCOPED_TRACE(k.key + " = " + k.value);
    TrainConfig c = before;
    expect_contains(
        error_of([&] { apply_train_override(c, k.key, k.value); }),
        "frameshard::config: " + k.message);
    expect_same(c, before);
  }
}

TEST(Recipe, DistributedOverrideErrorsAreFrameshardConfigErrors) {
  for (const auto& kv : std::vector<std::pair<std::string, std::string>>{
           {"distributed.cp_size", "0"},
           {kFs + ".partitioner", "random"},
           {"distributed.pp_size", "2"}}) {
    SCOPED_TRACE(kv.first);
    Config core = default_train_config().parallel;
    TrainConfig c = default_train_config();
    EXPECT_EQ(
        error_of([&] { apply_train_override(c, kv.first, kv.second); }),
        error_of([&] { apply_override(core, kv.first, kv.second); }));
  }
}

// ------------------------------------------------------------ plan options

TEST(Recipe, ShardedArmFollowsTheFrameShardingSectionAndReplicatedIsOff) {
  TrainConfig c = default_train_config();
  apply_train_override(c, kFs + ".partitioner", "greedy");
  apply_train_override(c, kFs + ".min_local_patch_rows", "7");
  const PlanOptions on = arm_plan_options(c, true);
  EXPECT_EQ(on.world, 2);
  EXPECT_TRUE(on.policy.enabled);
  EXPECT_EQ(on.partitioner, Partitioner::kGreedy);
  EXPECT_EQ(on.min_local_patch_rows, 7);
  EXPECT_EQ(on.policy.min_tokens, 56);
  EXPECT_EQ(on.policy.min_frames, 32);
  const PlanOptions off = arm_plan_options(c, false);
  EXPECT_FALSE(off.policy.enabled);
  EXPECT_EQ(off.world, 2);
  // The sharded arm of a recipe with sharding disabled stays off.
  apply_train_override(c, kFs + ".enabled", "false");
  EXPECT_FALSE(arm_plan_options(c, true).policy.enabled);
}

TEST(Recipe, CostModelCountsTheTrainedTowerFamily) {
  TrainConfig c = default_train_config();
  apply_train_override(c, "model.tower", "qwen2.5-vl");
  const PlanOptions o = arm_plan_options(c, true);
  EXPECT_EQ(o.cost.label, parse_cost_alpha("auto", "qwen2.5-vl").label);
  EXPECT_GT(o.cost.window, 0);  // Qwen2.5-VL's window attention counted
}

TEST(Recipe, MegatronModeIsACountSplitWithoutThresholdsOrFloor) {
  TrainConfig c = default_train_config();
  apply_train_override(c, kFs + ".enabled", "false");  // overridden
  apply_train_override(c, "model.vision_dp_over_cp", "true");
  apply_train_override(c, "distributed.cp_size", "4");
  const PlanOptions o = arm_plan_options(c, true);
  EXPECT_EQ(o.partitioner, Partitioner::kCount);
  EXPECT_TRUE(o.policy.enabled);
  EXPECT_EQ(o.policy.min_tokens, 0);
  EXPECT_EQ(o.policy.min_frames, 0);
  EXPECT_EQ(o.min_local_patch_rows, 0);
  EXPECT_FALSE(arm_plan_options(c, false).policy.enabled);
  // 7 small frames on 4 ranks: 1, 1, 1, 4 (remainder on the last rank),
  // sharded although far below Automodel's thresholds, no floor frames.
  const ShardPlan plan = make_plan(
      {{1, 2, 2},
       {1, 2, 2},
       {1, 2, 2},
       {1, 2, 2},
       {1, 2, 2},
       {1, 2, 2},
       {1, 2, 2}},
      o);
  EXPECT_EQ(plan.path, PlanPath::kSharded);
  ASSERT_EQ(plan.ranks.size(), 4u);
  EXPECT_EQ(plan.ranks[0].units.size(), 1u);
  EXPECT_EQ(plan.ranks[3].units.size(), 4u);
  EXPECT_EQ(plan.ranks[0].pad_frames, 0);  // no floor frames
  // One frame on four ranks: placeholder (dummy) frames for the others.
  const ShardPlan one = make_plan({{1, 2, 2}}, o);
  EXPECT_EQ(one.path, PlanPath::kSharded);
  EXPECT_EQ(one.ranks[3].units.size(), 0u);
  EXPECT_EQ(one.ranks[3].dummy_frames, 1);
}

TEST(Recipe, MegatronModeIsASilentNoOpAtCpOne) {
  TrainConfig c = default_train_config();
  apply_train_override(c, "model.vision_dp_over_cp", "true");
  apply_train_override(c, "distributed.cp_size", "1");
  const PlanOptions o = arm_plan_options(c, true);
  EXPECT_FALSE(o.policy.enabled);
  EXPECT_EQ(make_plan({{1, 4, 4}}, o).path, PlanPath::kReplicated);
}

}  // namespace
}  // namespace train
}  // namespace frameshard
