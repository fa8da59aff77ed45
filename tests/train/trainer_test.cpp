// The training job's two arms on ranks as threads: replicated and sharded
// vision give the same losses and parameter gradients; CP=2 gives what one
// process gives; the sharded tower sees only its share; bad groups and
// disagreeing recipes fail on every rank.
#include <frameshard/train/trainer.h>

#include "testing/qwen_fixtures.h"
#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "train/tiny_recipe.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace frameshard {
namespace {

using testing::max_abs_diff;

train::TrainConfig tiny_config(int64_t cp, const std::string& dtype) {
  return testing::tiny_train_config(cp, dtype);
}

struct ArmResult {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> grads;  // after step 0's backward
  std::vector<int64_t> tower_rows;          // per rank, step 0
  std::string plan_path;
};

ArmResult run_arm(const train::TrainConfig& c, bool sharded, int world) {
  ArmResult res;
  res.tower_rows.resize(static_cast<size_t>(world));
  testing::RunRanksOptions o;
  o.timeout = std::chrono::seconds(20);
  testing::run_ranks(
      world,
      [&](int rank, ProcessGroupPtr pg) {
        train::TrainGroups g{pg, pg, c10::Device(c10::kCPU)};
        train::Trainer t(c, g, sharded);
        testing::RankRun run = testing::run_steps(t, c.train.steps);
        res.tower_rows[static_cast<size_t>(rank)] = run.first.tower_rows;
        if (rank == 0) {
          res.plan_path = run.first.plan_path;
          res.grads = std::move(run.grads);
          res.losses = std::move(run.losses);
        }
      },
      o);
  return res;
}

double max_grad_diff(const ArmResult& a, const ArmResult& b) {
  double d = 0.0;
  for (const auto& [name, g] : a.grads) {
    d = std::max(d, max_abs_diff(g, b.grads.at(name)));
  }
  return d;
}

// Expects `got` to train like `want`: each step's loss and every gradient
// after step 0 within `tol`.
void expect_trains_alike(
    const ArmResult& want, const ArmResult& got, double tol) {
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(want.losses[s], got.losses[s], tol) << "step " << s;
  }
  EXPECT_LE(max_grad_diff(want, got), tol);
}

TEST(Trainer, ShardedAndReplicatedArmsAgreeInLossesAndGradients) {
  const auto c = tiny_config(2, "float32");
  const ArmResult rep = run_arm(c, false, 2);
  const ArmResult sh = run_arm(c, true, 2);
  EXPECT_EQ(rep.plan_path, "replicated");
  EXPECT_EQ(sh.plan_path, "sharded");
  ASSERT_EQ(rep.losses.size(), 3u);
  ASSERT_EQ(sh.losses.size(), 3u);
  EXPECT_GT(rep.grads.size(), 10u);
  expect_trains_alike(rep, sh, 1e-5);
  // The losses move: the optimizer trains.
  EXPECT_NE(rep.losses.front(), rep.losses.back());
}

TEST(Trainer, EachShardedRankTowerRunsOnlyItsShareOfTheRows) {
  const auto c = tiny_config(2, "float32");
  const ArmResult rep = run_arm(c, false, 2);
  const ArmResult sh = run_arm(c, true, 2);
  // Replicated: every rank runs every row; sharded: they split them.
  EXPECT_EQ(rep.tower_rows[0], rep.tower_rows[1]);
  EXPECT_EQ(sh.tower_rows[0] + sh.tower_rows[1], rep.tower_rows[0]);
  EXPECT_LT(sh.tower_rows[0], rep.tower_rows[0]);
  EXPECT_LT(sh.tower_rows[1], rep.tower_rows[0]);
}

TEST(Trainer, ContextParallelTrainingEqualsOneProcessInFloat64) {
  // CP=2 (split sequence, attention across ranks, gathered vision) against
  // CP=1 (everything in one process): the same losses and gradients.
  const ArmResult one = run_arm(tiny_config(1, "float64"), true, 1);
  const ArmResult two = run_arm(tiny_config(2, "float64"), true, 2);
  ASSERT_EQ(one.losses.size(), two.losses.size());
  expect_trains_alike(one, two, 1e-10);
}

TEST(Trainer, CpSizeOneRunsReplicatedSilently) {
  const ArmResult one = run_arm(tiny_config(1, "float32"), true, 1);
  EXPECT_EQ(one.plan_path, "replicated");
  EXPECT_EQ(one.losses.size(), 3u);
}

TEST(Trainer, ActivationCheckpointingChangesNoValue) {
  auto c = tiny_config(2, "float64");
  const ArmResult plain = run_arm(c, true, 2);
  c.model.vision_checkpointing = true;
  const ArmResult ckpt = run_arm(c, true, 2);
  expect_trains_alike(plain, ckpt, 1e-12);
}

TEST(Trainer, MegatronVisionDpOverCpMatchesReplicated) {
  auto c = tiny_config(2, "float32");
  c.parallel.frame_sharding.enabled = false;
  c.model.vision_dp_over_cp = true;
  const ArmResult rep = run_arm(c, false, 2);
  const ArmResult mg = run_arm(c, true, 2);
  EXPECT_EQ(mg.plan_path, "sharded");
  expect_trains_alike(rep, mg, 1e-5);
}

// Nemotron Omni's RADIO tower (model.tower radio) under both rules, the
// Megatron Bridge recipe's count split and frameshard's cost balance: the
// same losses and gradients as its replicated arm.
TEST(Trainer, RadioTowerTrainsLikeReplicatedUnderBothRules) {
  auto c = tiny_config(2, "float32");
  c.model.tower = "radio";
  const ArmResult rep = run_arm(c, false, 2);
  const ArmResult fs = run_arm(c, true, 2);
  c.parallel.frame_sharding.enabled = false;
  c.model.vision_dp_over_cp = true;
  const ArmResult mg = run_arm(c, true, 2);
  ASSERT_FALSE(rep.grads.empty());
  EXPECT_TRUE(rep.grads.count(
      "tower.vision_model.radio_model.model.blocks.0.attn.qkv.weight"))
      << "the RADIO tower ran";
  for (const ArmResult* arm : {&fs, &mg}) {
    EXPECT_EQ(arm->plan_path, "sharded");
    expect_trains_alike(rep, *arm, 1e-5);
  }
}

TEST(Trainer, AHuggingFaceCheckpointsTowerTrainsInBothArmsAlike) {
  // model.model_dir: the tower of a checkpoint (a tiny Qwen3-VL with two
  // DeepStack mergers, width 24) replaces the random one; the decoder takes
  // its width.
  testing::TemporaryDirectory dir;
  const auto cfg = testing::tiny_config(models::QwenFamily::kQwen3VL);
  testing::write_model_dir(
      dir.path(), testing::random_model(cfg, at::kFloat, 3), "model.visual.");
  auto c = tiny_config(2, "float32");
  c.model.model_dir = dir.path();
  c.model.text_hidden = 24;
  c.model.text_heads = 2;
  const ArmResult rep = run_arm(c, false, 2);
  const ArmResult sh = run_arm(c, true, 2);
  EXPECT_EQ(sh.plan_path, "sharded");
  expect_trains_alike(rep, sh, 1e-5);
  // The checkpoint's tensors are what the tower trains (HF names).
  EXPECT_EQ(sh.grads.count("tower.deepstack_merger_list.1.norm.weight"), 1u);
  EXPECT_EQ(sh.grads.at("decoder.embed.weight").size(1), 24);
}

TEST(Trainer, OwnerRoutedEmbeddingsTrainLikeTheReplicatedArm) {
  // gather: owner sends each visual row only to the rank whose chunks hold
  // its position; CP 2 and 3, float64: the losses and gradients of the
  // replicated arm, and those of gather: all.
  for (int cp : {2, 3}) {
    auto c = tiny_config(cp, "float64");
    const ArmResult rep = run_arm(c, false, cp);
    const ArmResult all = run_arm(c, true, cp);
    c.parallel.frame_sharding.gather = "owner";
    const ArmResult owner = run_arm(c, true, cp);
    SCOPED_TRACE("cp " + std::to_string(cp));
    EXPECT_EQ(owner.plan_path, "sharded");
    expect_trains_alike(rep, owner, 1e-10);
    EXPECT_LE(max_grad_diff(all, owner), 1e-10);
  }
}

// Constructs a sharded trainer of config_of(rank) on each of `world` ranks;
// what each rank raised.
std::vector<testing::RankOutcome> construct_on_ranks(
    int world, const std::function<train::TrainConfig(int)>& config_of) {
  testing::RunRanksOptions o;
  return testing::run_ranks_collect(
      world,
      [&](int rank, ProcessGroupPtr pg) {
        const train::TrainConfig c = config_of(rank);
        train::TrainGroups g{pg, pg, c10::Device(c10::kCPU)};
        train::Trainer t(c, g, true);
      },
      o);
}

// Expects every rank to have raised an error containing `needle`.
void expect_every_rank_raised(
    const std::vector<testing::RankOutcome>& outcomes,
    const std::string& needle) {
  for (const auto& out : outcomes) {
    ASSERT_FALSE(out.ok);
    EXPECT_NE(out.error.find(needle), std::string::npos) << out.error;
  }
}

TEST(Trainer, GroupSmallerThanTheRecipeRaisesOnEveryRank) {
  const auto outcomes =
      construct_on_ranks(2, [](int) { return tiny_config(3, "float32"); });
  expect_every_rank_raised(
      outcomes,
      "expected a world of distributed.dp_size x cp_size = 1 x 3 = 3 ranks, "
      "got 2");
  EXPECT_EQ(
      testing::strip_rank_prefix(outcomes[0].error),
      testing::strip_rank_prefix(outcomes[1].error));
}

TEST(Trainer, RanksWithDifferentRecipesRaiseOnEveryRank) {
  const auto outcomes = construct_on_ranks(2, [](int rank) {
    auto c = tiny_config(2, "float32");
    c.train.lr = rank == 0 ? 1e-2 : 2e-2;
    return c;
  });
  expect_every_rank_raised(
      outcomes, "ranks disagree on the config fingerprint");
}

}  // namespace
}  // namespace frameshard
