// The training job with frame_sharding.mesh_dims [dp, cp] on ranks as
// threads (world group plus Gloo CP subgroups, as `frameshard train` builds
// them): the sharded arm encodes over the whole dp x cp mesh and trains
// exactly like mesh_dims [cp] (each replica's vision on its own CP group)
// and like the replicated arm -- losses, every parameter gradient and the
// parameters after the optimizer's steps, float64 -- at DP 2 x CP 1 and
// DP 2 x CP 2 and DP 3 x CP 2, with owner routing too, and policy auto's
// per-step choice of the mesh or the CP-only plan; a replica whose batch is
// text-only
// joins every collective (a hang would end the process: run_ranks'
// hang_limit) on the sharded and the replicated mesh path.
#include <frameshard/runtime/process_group.h>
#include <frameshard/train/trainer.h>

#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "train/mesh_groups.h"
#include "train/tiny_recipe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace frameshard {
namespace {

using testing::max_abs_diff;

const std::vector<std::string> kMesh{"dp", "cp"};
const std::vector<std::string> kCpOnly{"cp"};

train::TrainConfig mesh_config(
    int64_t dp, int64_t cp, const std::vector<std::string>& dims) {
  train::TrainConfig c = testing::tiny_train_config(cp, "float64");
  c.parallel.dp_size = dp;
  c.parallel.frame_sharding.mesh_dims = dims;
  return c;
}

struct MeshArm {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> grads;  // rank 0, after step 0
  // Every rank's parameters after the last step (the replicas must agree).
  std::vector<std::map<std::string, at::Tensor>> params;
  std::vector<int64_t> tower_rows;  // per rank, step 0
  std::vector<std::string> paths;   // per rank, step 0
  std::vector<std::string> modes;   // per rank, step 0: mesh, cp-only or ""
};

MeshArm run_mesh_arm(const train::TrainConfig& c, bool sharded) {
  const int64_t dp = c.parallel.dp_size;
  const int64_t cp = c.parallel.cp_size;
  const int world = static_cast<int>(dp * cp);
  MeshArm res;
  res.params.resize(static_cast<size_t>(world));
  res.tower_rows.resize(static_cast<size_t>(world));
  res.paths.resize(static_cast<size_t>(world));
  res.modes.resize(static_cast<size_t>(world));
  testing::run_mesh_ranks(
      dp,
      cp,
      std::chrono::seconds(20),
      [&](int rank, const train::TrainGroups& g) {
        train::Trainer t(c, g, sharded);
        const auto r = static_cast<size_t>(rank);
        testing::RankRun run = testing::run_steps(t, c.train.steps);
        res.tower_rows[r] = run.first.tower_rows;
        res.paths[r] = run.first.plan_path;
        res.modes[r] = run.first.mesh_mode;
        if (rank == 0) {
          res.grads = std::move(run.grads);
          res.losses = std::move(run.losses);
        }
        for (const auto& p : t.named_parameters()) {
          res.params[r][p.first] = p.second.detach().clone();
        }
      });
  return res;
}

double max_diff(
    const std::map<std::string, at::Tensor>& a,
    const std::map<std::string, at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (const auto& [name, t] : a) {
    d = std::max(d, max_abs_diff(t, b.at(name)));
  }
  return d;
}

// Losses of every step, step 0's gradients and every rank's parameters
// after the steps agree (float64: only the summation order differs).
void expect_same_training(const MeshArm& a, const MeshArm& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_NEAR(a.losses[s], b.losses[s], 1e-10) << "step " << s;
  }
  EXPECT_GT(a.grads.size(), 10u);
  EXPECT_LE(max_diff(a.grads, b.grads), 1e-10);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t r = 0; r < a.params.size(); ++r) {
    EXPECT_LE(max_diff(a.params[r], b.params[r]), 1e-9) << "rank " << r;
    EXPECT_LE(max_diff(a.params[r], a.params[0]), 1e-12) << "rank " << r;
  }
  EXPECT_NE(a.losses.front(), a.losses.back());  // the optimizer trains
}

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

TEST(MeshTrainer, Dp2Cp1TrainsLikeCpOnlyAndBalancesTheReplicas) {
  const MeshArm cp_only = run_mesh_arm(mesh_config(2, 1, kCpOnly), true);
  const MeshArm mesh = run_mesh_arm(mesh_config(2, 1, kMesh), true);
  expect_same_training(mesh, cp_only);
  // CP 1 alone has nobody to shard with; the mesh shards over both
  // replicas: the same rows in all, in other shares.
  EXPECT_EQ(cp_only.paths, (std::vector<std::string>(2, "replicated")));
  EXPECT_EQ(mesh.paths, (std::vector<std::string>(2, "sharded")));
  EXPECT_EQ(sum(mesh.tower_rows), sum(cp_only.tower_rows));
  EXPECT_NE(mesh.tower_rows, cp_only.tower_rows);
  EXPECT_LE(
      *std::max_element(mesh.tower_rows.begin(), mesh.tower_rows.end()),
      *std::max_element(cp_only.tower_rows.begin(), cp_only.tower_rows.end()));
}

TEST(MeshTrainer, Dp2Cp2TrainsLikeCpOnlyAndLikeTheReplicatedArm) {
  const MeshArm cp_only = run_mesh_arm(mesh_config(2, 2, kCpOnly), true);
  const MeshArm mesh = run_mesh_arm(mesh_config(2, 2, kMesh), true);
  // The replicated arm ignores mesh_dims: vision replicated per CP group.
  const MeshArm rep = run_mesh_arm(mesh_config(2, 2, kMesh), false);
  expect_same_training(mesh, cp_only);
  expect_same_training(mesh, rep);
  EXPECT_EQ(mesh.paths, (std::vector<std::string>(4, "sharded")));
  EXPECT_EQ(rep.paths, (std::vector<std::string>(4, "replicated")));
  EXPECT_EQ(sum(mesh.tower_rows), sum(cp_only.tower_rows));
  EXPECT_NE(mesh.tower_rows, cp_only.tower_rows);
}

TEST(MeshTrainer, Dp3Cp2TrainsLikeCpOnly) {
  // Six ranks: three replicas of CP 2, each its own batch.
  const MeshArm cp_only = run_mesh_arm(mesh_config(3, 2, kCpOnly), true);
  const MeshArm mesh = run_mesh_arm(mesh_config(3, 2, kMesh), true);
  expect_same_training(mesh, cp_only);
  EXPECT_EQ(mesh.paths, (std::vector<std::string>(6, "sharded")));
  EXPECT_EQ(mesh.modes, (std::vector<std::string>(6, "mesh")));
  EXPECT_EQ(cp_only.modes, (std::vector<std::string>(6, "")));
  EXPECT_EQ(sum(mesh.tower_rows), sum(cp_only.tower_rows));
}

TEST(MeshTrainer, OwnerRoutedMeshTrainsLikeCpOnlyGatherAll) {
  // gather: owner on the mesh: each row goes only to the CP rank of its
  // replica whose sequence chunks hold it (the replica's token_owner).
  auto c = mesh_config(2, 2, kMesh);
  c.parallel.frame_sharding.gather = "owner";
  const MeshArm owner = run_mesh_arm(c, true);
  const MeshArm all = run_mesh_arm(mesh_config(2, 2, kCpOnly), true);
  EXPECT_EQ(owner.paths, (std::vector<std::string>(4, "sharded")));
  expect_same_training(owner, all);
}

TEST(MeshTrainer, DpOneMeshIsCpOnly) {
  // [dp, cp] with dp_size 1 is [cp]: the same plan and the same training.
  const MeshArm cp_only = run_mesh_arm(mesh_config(1, 2, kCpOnly), true);
  const MeshArm mesh = run_mesh_arm(mesh_config(1, 2, kMesh), true);
  expect_same_training(mesh, cp_only);
  EXPECT_EQ(mesh.tower_rows, cp_only.tower_rows);
}

// Replica 0 draws the media sample every step, replica 1 the text-only one
// (samples_per_step 1, dp 2: sample (2 s + q) mod 2 = q).
train::TrainConfig text_only_replica_config(
    const testing::TemporaryDirectory& dir,
    int64_t cp,
    const std::vector<std::string>& dims) {
  const std::string path = dir.path() + "/half_text.jsonl";
  std::ofstream(path) << "{\"grid_thw\": [[1, 8, 8], [2, 4, 6], [1, 6, 4]]}\n"
                         "{\"grid_thw\": [], \"text_tokens\": 24}\n";
  train::TrainConfig c = mesh_config(2, cp, dims);
  c.data.manifest = path;
  c.data.scale = 1;
  c.data.samples_per_step = 1;
  return c;
}

TEST(MeshTrainer, ATextOnlyReplicaJoinsEveryCollectiveAndTrainsAlike) {
  testing::TemporaryDirectory dir;
  for (int64_t cp : {1, 2}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const MeshArm cp_only =
        run_mesh_arm(text_only_replica_config(dir, cp, kCpOnly), true);
    const MeshArm mesh =
        run_mesh_arm(text_only_replica_config(dir, cp, kMesh), true);
    expect_same_training(mesh, cp_only);
    // The text-only replica's ranks (cp .. 2 cp - 1) run no tower on the
    // CP path, and encode replica 0's frames on the mesh.
    EXPECT_EQ(cp_only.tower_rows[static_cast<size_t>(cp)], 0);
    for (size_t r = 0; r < mesh.tower_rows.size(); ++r) {
      EXPECT_GT(mesh.tower_rows[r], 0) << "rank " << r;
      EXPECT_EQ(mesh.paths[r], "sharded") << "rank " << r;
    }
    // Below the policy's thresholds the mesh replicates: replica 1 runs no
    // tower and gets no rows, and still joins the metadata exchange and
    // the consensus.
    auto c = text_only_replica_config(dir, cp, kMesh);
    c.parallel.frame_sharding.min_tokens = 1 << 20;
    c.parallel.frame_sharding.min_frames = 1 << 20;
    const MeshArm replicated = run_mesh_arm(c, true);
    EXPECT_EQ(replicated.paths[0], "replicated");
    EXPECT_EQ(replicated.tower_rows[static_cast<size_t>(cp)], 0);
    expect_same_training(replicated, cp_only);
  }
}

TEST(MeshTrainer, PolicyAutoChoosesEachStepsPlanAndTrainsLikeCpOnly) {
  // The straggler (replica 1 text-only) pools; a min gain no step reaches
  // keeps every replica's frames on its own ranks. Both train as [cp].
  testing::TemporaryDirectory dir;
  const MeshArm cp_only =
      run_mesh_arm(text_only_replica_config(dir, 2, kCpOnly), true);
  auto c = text_only_replica_config(dir, 2, kMesh);
  c.parallel.frame_sharding.policy = "auto";
  // Seconds as a GPU-sized tower takes them (1 ms a patch row), so that
  // the tower, not the traffic, is what the choice weighs.
  c.parallel.frame_sharding.cost_alpha = "quadratic:0,1e-3,0";
  const MeshArm pooled = run_mesh_arm(c, true);
  EXPECT_EQ(pooled.modes, (std::vector<std::string>(4, "mesh")));
  EXPECT_GT(pooled.tower_rows[2], 0) << "the text-only replica encodes";
  expect_same_training(pooled, cp_only);
  c.parallel.frame_sharding.mesh_min_gain = 0.99;
  const MeshArm kept = run_mesh_arm(c, true);
  EXPECT_EQ(kept.modes, (std::vector<std::string>(4, "cp-only")));
  // A CP-only step runs over the CP groups, as mesh_dims [cp] does: the
  // same rows per rank, and the text-only replica runs no tower (through
  // the mesh's routes its ranks would encode a dummy frame).
  EXPECT_EQ(kept.tower_rows, cp_only.tower_rows);
  expect_same_training(kept, cp_only);
}

}  // namespace
}  // namespace frameshard
