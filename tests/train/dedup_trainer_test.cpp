// frame_sharding.dedup in the training job, on the grpo preset (every prompt
// sampled group_size times, each sample with the prompt's images), ranks as
// threads: at CP 2 the sharded arm with dedup trains like the arm without
// it (losses within 1e-5, float32) while its towers run on the distinct
// rows only; with frame sharding off it is AReaL's rank-local dedup (each
// rank its replica's distinct frames); over the dp x cp mesh (mesh_dims
// [dp, cp], groups spread over the replicas) each distinct frame is encoded
// once in the whole mesh, where the CP-only job encodes it once per
// replica.
#include <frameshard/runtime/process_group.h>
#include <frameshard/train/trainer.h>

#include "testing/run_ranks.h"
#include "train/mesh_groups.h"
#include "train/tiny_recipe.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace frameshard {
namespace {

// Groups of kG samples, spread: at dp 1 the replica packs one prompt's
// group, at dp 2 each replica one sample of each of the step's two prompts.
// Small enough for a unit test: scale 32 leaves 2 x 2 small frames (about
// 40 units a prompt, all of one shape, told apart by their pixels only)
// and a few 4 x 4 huge ones.
constexpr int64_t kG = 2;

train::TrainConfig grpo_config(int64_t dp, int64_t cp, bool dedup) {
  train::TrainConfig c = testing::tiny_train_config(cp, "float32");
  c.parallel.dp_size = dp;
  c.parallel.frame_sharding.dedup = dedup;
  c.data.preset = "grpo";
  c.data.scale = 32;
  c.data.text_tokens = 2;
  c.data.group_size = kG;
  c.data.group_order = "spread";
  c.train.steps = 2;
  return c;
}

struct GrpoRun {
  std::vector<double> losses;
  // metrics[step][rank]
  std::vector<std::vector<train::StepMetrics>> metrics;
};

GrpoRun run_grpo(const train::TrainConfig& c, bool sharded) {
  const int64_t dp = c.parallel.dp_size;
  const int64_t cp = c.parallel.cp_size;
  const int world = static_cast<int>(dp * cp);
  GrpoRun res;
  res.metrics.assign(
      static_cast<size_t>(c.train.steps),
      std::vector<train::StepMetrics>(static_cast<size_t>(world)));
  testing::run_mesh_ranks(
      dp,
      cp,
      std::chrono::seconds(30),
      [&](int rank, const train::TrainGroups& g) {
        train::Trainer t(c, g, sharded);
        for (int64_t s = 0; s < c.train.steps; ++s) {
          const train::StepMetrics m = t.step(s);
          res.metrics[static_cast<size_t>(s)][static_cast<size_t>(rank)] = m;
          if (rank == 0) {
            res.losses.push_back(m.loss);
          }
        }
      });
  return res;
}

void expect_grpo_losses(const GrpoRun& a, const GrpoRun& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_NEAR(a.losses[s], b.losses[s], 1e-5) << "step " << s;
  }
}

template <typename F>
int64_t sum_ranks(const std::vector<train::StepMetrics>& ranks, F field) {
  int64_t n = 0;
  for (const auto& m : ranks) {
    n += field(m);
  }
  return n;
}

int64_t all_tower_rows(const std::vector<train::StepMetrics>& ranks) {
  return sum_ranks(ranks, [](const auto& m) { return m.tower_rows; });
}

TEST(DedupTrainer, GrpoAtCp2TrainsAsWithoutDedupOnTheDistinctRowsOnly) {
  const GrpoRun off = run_grpo(grpo_config(1, 2, false), true);
  const GrpoRun on = run_grpo(grpo_config(1, 2, true), true);
  const GrpoRun rep = run_grpo(grpo_config(1, 2, true), false);  // never dedups
  expect_grpo_losses(on, off);
  expect_grpo_losses(on, rep);
  for (size_t s = 0; s < on.metrics.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const train::StepMetrics& m = on.metrics[s][0];
    EXPECT_EQ(m.plan_path, "sharded");
    // kG samples of one prompt: 1/kG of the frames are distinct.
    EXPECT_EQ(m.frames_total, kG * m.frames_distinct);
    EXPECT_EQ(m.rows_total, kG * m.rows_distinct);
    EXPECT_EQ(on.metrics[s][1].rows_distinct, m.rows_distinct);
    // The two towers share the distinct rows, no more.
    EXPECT_EQ(all_tower_rows(on.metrics[s]), m.rows_distinct);
    EXPECT_GT(m.hash_seconds, 0.0);
    // Without dedup the towers share every row; the replicated arm runs
    // every row on both ranks.
    const train::StepMetrics& o = off.metrics[s][0];
    EXPECT_EQ(o.frames_distinct, o.frames_total);
    EXPECT_EQ(o.rows_total, m.rows_total);
    EXPECT_EQ(all_tower_rows(off.metrics[s]), m.rows_total);
    EXPECT_EQ(all_tower_rows(rep.metrics[s]), 2 * m.rows_total);
    EXPECT_EQ(o.hash_seconds, 0.0);
  }
}

TEST(DedupTrainer, ShardingOffWithDedupIsRankLocalDedup) {
  // AReaL: each rank encodes its own batch's distinct frames; nothing is
  // shared between the CP ranks.
  train::TrainConfig c = grpo_config(1, 2, true);
  c.parallel.frame_sharding.enabled = false;
  const GrpoRun local = run_grpo(c, true);
  const GrpoRun off = run_grpo(grpo_config(1, 2, false), true);
  expect_grpo_losses(local, off);
  for (const auto& ranks : local.metrics) {
    for (const auto& m : ranks) {
      EXPECT_EQ(m.plan_path, "replicated");
      EXPECT_EQ(m.tower_rows, m.rows_distinct);
      EXPECT_EQ(m.rows_total, kG * m.rows_distinct);
    }
  }
}

TEST(DedupTrainer, TheMeshEncodesEachDistinctFrameOnceOverTheReplicas) {
  // dp 2 x cp 1, groups of 2 spread: each replica packs one sample of each
  // of the step's two prompts, so it has no repeat of its own.
  const std::vector<std::string> mesh{"dp", "cp"};
  auto config = [&](bool dedup, const std::vector<std::string>& dims) {
    train::TrainConfig c = grpo_config(2, 1, dedup);
    c.parallel.frame_sharding.mesh_dims = dims;
    return c;
  };
  const GrpoRun on = run_grpo(config(true, mesh), true);
  const GrpoRun off = run_grpo(config(false, mesh), true);
  const GrpoRun cp_only = run_grpo(config(true, {"cp"}), true);  // rank-local
  expect_grpo_losses(on, off);
  expect_grpo_losses(on, cp_only);
  for (size_t s = 0; s < on.metrics.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const auto& ranks = on.metrics[s];
    const auto& local = cp_only.metrics[s];
    EXPECT_EQ(ranks[0].plan_path, "sharded");
    EXPECT_EQ(ranks[0].frames_total, ranks[1].frames_total);
    // Both prompts once in the mesh: half of the 4 samples' frames, each
    // encoded by one rank; the CP-only job, dedup on, finds no repeat in a
    // replica and encodes every frame.
    const int64_t frames =
        sum_ranks(ranks, [](const auto& m) { return m.frames_total; });
    const int64_t distinct =
        sum_ranks(ranks, [](const auto& m) { return m.frames_distinct; });
    const int64_t rows =
        sum_ranks(ranks, [](const auto& m) { return m.rows_total; });
    const int64_t rows_distinct =
        sum_ranks(ranks, [](const auto& m) { return m.rows_distinct; });
    EXPECT_EQ(frames, 2 * distinct);
    EXPECT_EQ(rows, 2 * rows_distinct);
    EXPECT_EQ(all_tower_rows(ranks), rows_distinct);
    EXPECT_EQ(all_tower_rows(off.metrics[s]), rows);
    EXPECT_EQ(local[0].plan_path, "replicated");
    EXPECT_EQ(
        sum_ranks(local, [](const auto& m) { return m.rows_distinct; }), rows);
    EXPECT_EQ(all_tower_rows(local), rows);
  }
}

TEST(DedupTrainer, OnADp2Cp2MeshTheCpRanksOfAReplicaShareItsHashing) {
  // The CP ranks of a replica each hash part of its media and gather the
  // keys: the same keys, so the same distinct frames as at CP 1.
  train::TrainConfig c = grpo_config(2, 2, true);
  c.parallel.frame_sharding.mesh_dims = {"dp", "cp"};
  const GrpoRun cp2 = run_grpo(c, true);
  c = grpo_config(2, 1, true);
  c.parallel.frame_sharding.mesh_dims = {"dp", "cp"};
  const GrpoRun cp1 = run_grpo(c, true);
  expect_grpo_losses(cp2, cp1);
  for (size_t s = 0; s < cp2.metrics.size(); ++s) {
    const auto& ranks = cp2.metrics[s];  // replica q: ranks 2 q, 2 q + 1
    EXPECT_EQ(ranks[0].rows_distinct, ranks[1].rows_distinct);
    EXPECT_EQ(
        ranks[0].rows_distinct + ranks[2].rows_distinct,
        cp1.metrics[s][0].rows_distinct + cp1.metrics[s][1].rows_distinct);
    EXPECT_EQ(
        all_tower_rows(ranks), ranks[0].rows_distinct + ranks[2].rows_distinct);
    for (const auto& m : ranks) {
      EXPECT_GT(m.hash_seconds, 0.0);
    }
  }
}

}  // namespace
}  // namespace frameshard
