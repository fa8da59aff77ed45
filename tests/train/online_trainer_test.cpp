// cost_alpha online in the trainer (src/train/online_step.h) on ranks as
// threads. At CP 2 the first two steps plan with the FLOP model ("online
// (...)"); once those two calls are recorded a fit is in force on every
// rank, bitwise the same, the next steps' plans are made with it (their
// options carry it) and agree across ranks, the predicted and measured
// slowest towers are positive, and each rank's sample is its plan rank's
// frames. Over the dp x cp mesh (mesh_dims [dp, cp]) the same holds
// world-wide, each rank's sample being its world rank's in the mesh plan.
// The replicated arm has no online model.
#include <frameshard/online_cost.h>
#include <frameshard/train/trainer.h>

#include "train/mesh_groups.h"
#include "train/tiny_recipe.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace frameshard {
namespace {

constexpr int64_t kSteps = 4;

struct OnlineRank {
  std::vector<train::StepMetrics> steps;
  std::vector<uint64_t> fingerprints;   // the plan each step ran
  std::vector<std::string> plan_costs;  // that plan's cost model label
  bool online = false;
  WorkloadFit fit;  // in force after the last step
  int64_t calls = 0;
  std::vector<WorkloadSample> last_call;  // the window's last call
  std::vector<WorkloadSample> expected;   // rank_workload of the last plan
  std::vector<std::vector<WorkloadSample>> step_expected;  // of every step's
  std::vector<WorkloadSample> window;                      // every sample
  WorkloadSample all_units;  // every unit of the last plan on one rank
};

std::vector<OnlineRank> run_online(const train::TrainConfig& c, bool sharded) {
  const int64_t dp = c.parallel.dp_size;
  const int64_t cp = c.parallel.cp_size;
  const int world = static_cast<int>(dp * cp);
  std::vector<OnlineRank> out(static_cast<size_t>(world));
  testing::run_mesh_ranks(
      dp,
      cp,
      std::chrono::seconds(20),
      [&](int rank, const train::TrainGroups& g) {
        train::Trainer t(c, g, sharded);
        OnlineRank& r = out[static_cast<size_t>(rank)];
        for (int64_t s = 0; s < kSteps; ++s) {
          r.steps.push_back(t.step(s));
          r.fingerprints.push_back(t.vision_plan().fingerprint);
          r.plan_costs.push_back(t.vision_plan().options.cost.label);
          std::vector<WorkloadSample> step;
          for (int q = 0; q < static_cast<int>(t.vision_plan().ranks.size());
               ++q) {
            step.push_back(
                rank_workload(t.vision_plan(), q, t.plan_options().cost, 0.0));
          }
          r.step_expected.push_back(step);
        }
        const OnlineCost* online = t.online_cost();
        r.online = online != nullptr;
        if (!online) {
          return;
        }
        r.fit = online->in_force();
        r.calls = online->calls();
        const auto& w = online->window();
        r.window.assign(w.begin(), w.end());
        const ShardPlan& plan = t.vision_plan();
        r.last_call.assign(w.end() - world, w.end());
        for (int q = 0; q < static_cast<int>(plan.ranks.size()); ++q) {
          r.expected.push_back(
              rank_workload(plan, q, t.plan_options().cost, 0.0));
        }
        std::vector<int64_t> rows;
        for (const FrameUnit& u : plan.frames.units) {
          rows.push_back(u.patch_rows);
        }
        r.all_units = workload_sample(rows, t.plan_options().cost, false, 0.0);
      });
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

uint64_t bits(double v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

void expect_same_fit(const WorkloadFit& a, const WorkloadFit& b) {
  EXPECT_EQ(a.describe(), b.describe());
  EXPECT_EQ(bits(a.model.a), bits(b.model.a));
  EXPECT_EQ(bits(a.model.b), bits(b.model.b));
  EXPECT_EQ(bits(a.model.c), bits(b.model.c));
  EXPECT_EQ(bits(a.per_call), bits(b.per_call));
  EXPECT_EQ(bits(a.exchange_fixed), bits(b.exchange_fixed));
}

// A recorded sample has `want`'s features (the seconds are measured).
void expect_sample(const WorkloadSample& got, const WorkloadSample& want) {
  EXPECT_EQ(got.sum_p2, want.sum_p2);
  EXPECT_EQ(got.sum_p, want.sum_p);
  EXPECT_EQ(got.frames, want.frames);
  EXPECT_EQ(got.calls, 1.0);
  EXPECT_EQ(got.split_calls, want.split_calls);
  EXPECT_EQ(got.exchange_rows, want.exchange_rows);
  EXPECT_EQ(got.flop_cost, want.flop_cost);
  EXPECT_GT(got.seconds, 0.0);
}

// Every rank's sample of the last call is its own index's in the plan that
// ran.
void expect_plan_rank_samples(const OnlineRank& r) {
  ASSERT_EQ(r.last_call.size(), r.expected.size());
  for (size_t q = 0; q < r.expected.size(); ++q) {
    SCOPED_TRACE("sample of rank " + std::to_string(q));
    expect_sample(r.last_call[q], r.expected[q]);
  }
}

void expect_online_run(const std::vector<OnlineRank>& ranks) {
  const OnlineRank& r0 = ranks.front();
  for (size_t q = 0; q < ranks.size(); ++q) {
    SCOPED_TRACE("rank " + std::to_string(q));
    const OnlineRank& r = ranks[q];
    ASSERT_TRUE(r.online);
    ASSERT_EQ(r.steps.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(r.calls, kSteps);
    for (int64_t s = 0; s < kSteps; ++s) {
      const train::StepMetrics& m = r.steps[s];
      // Warm-up: steps 0 and 1 plan with FLOPs; step 1's update (2 calls
      // recorded) puts a fit in force, which plans steps 2 and 3.
      EXPECT_TRUE(starts_with(m.cost_model, s < 2 ? "online (" : "online: a="))
          << "step " << s << ": " << m.cost_model;
      EXPECT_EQ(r.plan_costs[s], m.cost_model) << "step " << s;
      if (s < 2) {  // later a fit may replace the fit (a noisy machine)
        EXPECT_EQ(m.cost_switched, s == 1)
            << "step " << s << ": " << m.cost_update;
      }
      EXPECT_GT(m.predicted_slowest_seconds, 0.0) << "step " << s;
      EXPECT_GT(m.measured_slowest_seconds, 0.0) << "step " << s;
      EXPECT_EQ(
          m.measured_slowest_seconds, r0.steps[s].measured_slowest_seconds);
      EXPECT_EQ(m.cost_model, r0.steps[s].cost_model);
      EXPECT_EQ(r.fingerprints[s], r0.fingerprints[s]) << "step " << s;
    }
    EXPECT_TRUE(starts_with(r.steps[0].cost_update, "warming up"));
    EXPECT_TRUE(r.fit.fitted);
    expect_same_fit(r.fit, r0.fit);
    expect_plan_rank_samples(r);
  }
}

train::TrainConfig online_config(int64_t dp, int64_t cp) {
  train::TrainConfig c = testing::tiny_train_config(cp, "float32");
  c.parallel.dp_size = dp;
  c.parallel.frame_sharding.cost_alpha = kOnlineCost;
  return c;
}

TEST(OnlineTrainer, Cp2LearnsOneFitOnEveryRankAfterTheWarmUp) {
  const std::vector<OnlineRank> ranks = run_online(online_config(1, 2), true);
  expect_online_run(ranks);
  EXPECT_EQ(ranks[0].steps[0].plan_path, "sharded");
}

TEST(OnlineTrainer, ASplitPlansSamplesCountEachPieceAgainstItsWholeFrame) {
  // Pages at CP 4 and exchanges priced at nothing: the FLOP plans of the
  // warm-up cut the largest page. Each holder's sample counts its piece's
  // attention to the whole page and the K/V rows it receives, as
  // rank_workload of the plan that ran does.
  train::TrainConfig c = online_config(1, 4);
  c.parallel.frame_sharding.split_frames = true;
  c.parallel.frame_sharding.split_exchange_cost = 0.0;
  c.parallel.frame_sharding.split_exchange_latency_us = 0.0;
  c.parallel.frame_sharding.split_min_gain = 0.0;
  c.data.preset = "doc";
  const std::vector<OnlineRank> ranks = run_online(c, true);
  expect_online_run(ranks);
  const OnlineRank& r = ranks[0];
  ASSERT_EQ(r.window.size(), 4u * kSteps);
  double received = 0.0;
  for (int64_t s = 0; s < kSteps; ++s) {
    for (size_t q = 0; q < 4; ++q) {
      SCOPED_TRACE("step " + std::to_string(s) + ", rank " + std::to_string(q));
      const WorkloadSample& got = r.window[4 * s + q];
      expect_sample(got, r.step_expected[s][q]);
      received += s == 0 ? got.exchange_rows : 0.0;
    }
  }
  EXPECT_GT(received, 0.0);  // step 0 cut a page
}

TEST(OnlineTrainer, TheMeshLearnsOneFitOverTheWholeWorld) {
  train::TrainConfig c = online_config(2, 1);
  c.parallel.frame_sharding.mesh_dims = {"dp", "cp"};
  const std::vector<OnlineRank> ranks = run_online(c, true);
  expect_online_run(ranks);
  EXPECT_EQ(ranks[1].steps[0].mesh_mode, "mesh");
}

TEST(OnlineTrainer, AReplicatedStepSamplesEveryFrameOfItsBatch) {
  // dp 2 x cp 1 with mesh_dims [cp]: nobody to shard with, each rank runs
  // its own replica's batch whole; the first fit comes from the same
  // samples on both (later ones may differ: their batches differ).
  const std::vector<OnlineRank> ranks = run_online(online_config(2, 1), true);
  for (size_t q = 0; q < ranks.size(); ++q) {
    SCOPED_TRACE("rank " + std::to_string(q));
    const OnlineRank& r = ranks[q];
    ASSERT_TRUE(r.online);
    EXPECT_EQ(r.steps.back().plan_path, "replicated");
    ASSERT_EQ(r.last_call.size(), 2U);
    expect_sample(r.last_call[q], r.all_units);
    EXPECT_EQ(r.steps[2].cost_model, ranks[0].steps[2].cost_model);
    EXPECT_TRUE(starts_with(r.steps[2].cost_model, "online: a="));
  }
}

TEST(OnlineTrainer, MeshStepsThatFallBackToEachReplicasPlanKeepOneModel) {
  // policy auto with a gain no plan reaches: every step over the mesh runs
  // each replica's own CP plan (different batches). The world's models
  // must stay one: they plan the next mesh step together.
  train::TrainConfig c = online_config(2, 1);
  c.parallel.frame_sharding.mesh_dims = {"dp", "cp"};
  c.parallel.frame_sharding.policy = "auto";
  c.parallel.frame_sharding.mesh_min_gain = 0.99;
  const std::vector<OnlineRank> ranks = run_online(c, true);
  for (size_t q = 0; q < ranks.size(); ++q) {
    SCOPED_TRACE("rank " + std::to_string(q));
    const OnlineRank& r = ranks[q];
    ASSERT_TRUE(r.online);
    EXPECT_TRUE(r.fit.fitted);
    expect_same_fit(r.fit, ranks[0].fit);
    for (int64_t s = 0; s < kSteps; ++s) {
      EXPECT_EQ(r.steps[s].cost_model, ranks[0].steps[s].cost_model);
      EXPECT_NE(r.steps[s].mesh_mode, "mesh") << "step " << s;
    }
  }
}

TEST(OnlineTrainer, TheReplicatedArmPlansWithoutIt) {
  for (const OnlineRank& r : run_online(online_config(1, 2), false)) {
    EXPECT_FALSE(r.online);
    const train::StepMetrics& m = r.steps.back();
    EXPECT_TRUE(starts_with(m.cost_model, "online (")) << m.cost_model;
    EXPECT_EQ(m.cost_update, "");
    EXPECT_EQ(m.predicted_slowest_seconds, 0.0);
  }
}

}  // namespace
}  // namespace frameshard
