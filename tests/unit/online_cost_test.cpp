// The online cost model (frameshard/online_cost.h): the workload fit, its
// outlier rejection, and when a fit replaces the model in force -- FLOPs
// while warming up, never a fit worse than FLOPs, no oscillation on noise.
#include <frameshard/cost.h>
#include <frameshard/online_cost.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/splitmix64.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

// The machine's truth: seconds of one rank's units.
struct Truth {
  double a = 2e-9, b = 3e-7, c = 4e-4, per_call = 2e-3, split = 1e-3;
  double kv_row = 5e-8;  // per K/V row a piece receives
  double scale = 1.0;    // a slower device multiplies everything
  double seconds(const WorkloadSample& s) const {
    return scale *
           (a * s.sum_p2 + b * s.sum_p + c * s.frames + per_call * s.calls +
            split * s.split_calls + kv_row * s.exchange_rows);
  }
};

const CostModel& flops() {
  static const CostModel m = flop_cost_model(tower_preset("qwen3-vl"));
  return m;
}

WorkloadSample sample_of(const std::vector<int64_t>& rows, bool split) {
  return workload_sample(rows, flops(), split, 1.0);
}

// A random rank workload of 1-6 frames of 64-4096 rows.
std::vector<int64_t> random_units(SplitMix64& rng) {
  std::vector<int64_t> rows(1 + rng.below(6));
  for (int64_t& p : rows) {
    p = 64 * static_cast<int64_t>(1 + rng.below(64));
  }
  return rows;
}

std::vector<WorkloadSample> exact_samples(const Truth& truth, int n) {
  SplitMix64 rng(7);
  std::vector<WorkloadSample> out;
  for (int i = 0; i < n; ++i) {
    WorkloadSample s = sample_of(random_units(rng), i % 3 == 0);
    if (i % 3 == 0) {
      s.exchange_rows = 64.0 * static_cast<double>(rng.below(48));
    }
    s.seconds = truth.seconds(s);
    out.push_back(s);
  }
  return out;
}

// One batch planned with `plan_with` over `world` ranks: each rank's units.
std::vector<std::vector<int64_t>> plan_batch(
    const std::vector<int64_t>& batch,
    const WorkloadFit& plan_with,
    int64_t world) {
  std::vector<double> costs;
  for (const int64_t p : batch) {
    costs.push_back(plan_with.model(p));
  }
  const Partition part = partition_costs(costs, world);
  std::vector<std::vector<int64_t>> ranks(world);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    ranks[part.assignment[i]].push_back(batch[i]);
  }
  return ranks;
}

OnlineCost::Slowest slowest_of(
    const std::vector<int64_t>& batch, int64_t world) {
  return
      [batch, world](const WorkloadFit& plan_with, const WorkloadFit& judge) {
        double worst = 0.0;
        for (const auto& units : plan_batch(batch, plan_with, world)) {
          worst = std::max(worst, judge.predict(sample_of(units, false)));
        }
        return worst;
      };
}

// Runs `calls` calls of `batch` at `world` ranks, each rank's time the
// truth times (1 + noise * uniform[-1, 1]); returns the number of calls
// whose plan differed from the previous call's once a fit was in force.
int run_calls(
    OnlineCost& online,
    const std::vector<int64_t>& batch,
    int64_t world,
    const Truth& truth,
    double noise,
    int calls,
    uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<std::vector<int64_t>> previous;
  int changes = 0;
  for (int i = 0; i < calls; ++i) {
    const auto plan = plan_batch(batch, online.in_force(), world);
    if (online.in_force().fitted) {
      changes += !previous.empty() && plan != previous;
      previous = plan;
    }
    std::vector<WorkloadSample> call;
    for (const auto& units : plan) {
      WorkloadSample s = sample_of(units, false);
      const double u = static_cast<double>(rng.below(1 << 20)) / (1 << 20);
      s.seconds = truth.seconds(s) * (1.0 + noise * (2.0 * u - 1.0));
      call.push_back(s);
    }
    online.record(call);
    online.update(slowest_of(batch, world));
  }
  return changes;
}

// A large image, then pages: whether a page goes with the image or not
// depends on how a page's cost compares with the image's, which a fit
// moved by noise changes (the cut's two choices are 3 % apart).
std::vector<int64_t> tied_batch() {
  std::vector<int64_t> batch = {4096};
  batch.insert(batch.end(), 25, 1024);
  return batch;
}

TEST(FitWorkloads, RecoversEveryCoefficientFromExactTimes) {
  const Truth truth;
  const WorkloadFit fit = fit_workloads(exact_samples(truth, 40));
  EXPECT_NEAR(fit.model.a / truth.a, 1.0, 1e-6);
  EXPECT_NEAR(fit.model.b / truth.b, 1.0, 1e-6);
  EXPECT_NEAR(fit.model.c / truth.c, 1.0, 1e-6);
  EXPECT_NEAR(fit.per_call / truth.per_call, 1.0, 1e-6);
  EXPECT_NEAR(fit.exchange_fixed / truth.split, 1.0, 1e-6);
  EXPECT_NEAR(fit.exchange_row / truth.kv_row, 1.0, 1e-6);
  EXPECT_LT(fit.rms_relative_error, 1e-9);
  EXPECT_EQ(fit.rejected, 0);
  EXPECT_TRUE(fit.fitted);
  EXPECT_EQ(fit.model.seconds_per_unit, 1.0);
  expect_contains(fit.describe(), "online: a=2e-09");
}

TEST(FitWorkloads, RejectsAStragglingCallAndStillRecoversTheModel) {
  const Truth truth;
  std::vector<WorkloadSample> samples = exact_samples(truth, 40);
  samples[11].seconds *= 5.0;  // a call the machine stalled
  const WorkloadFit fit = fit_workloads(samples);
  EXPECT_EQ(fit.rejected, 1);
  EXPECT_NEAR(fit.model.a / truth.a, 1.0, 1e-6);
  EXPECT_NEAR(fit.per_call / truth.per_call, 1.0, 1e-6);
  // Without the rejection the straggler bends the fit.
  OnlineCostOptions keep_all;
  keep_all.min_outlier = 1e9;
  EXPECT_GT(
      std::fabs(fit_workloads(samples, keep_all).model.a / truth.a - 1.0),
      0.01);
}

TEST(FitWorkloads, NamesTheSampleAndFieldOfBadInput) {
  std::vector<WorkloadSample> samples = exact_samples(Truth{}, 3);
  samples[1].seconds = 0.0;
  expect_contains(
      error_of([&] { fit_workloads(samples); }),
      "frameshard::fit_workloads: expected samples[1].seconds finite and > 0, "
      "got 0");
  samples[1].seconds = 1.0;
  samples[2].frames = -1.0;
  expect_contains(
      error_of([&] { fit_workloads(samples); }),
      "expected samples[2].frames finite and >= 0, got -1");
  expect_contains(
      error_of([&] { fit_workloads({}); }),
      "expected at least one sample, got none");
  OnlineCostOptions bad;
  bad.window = 0;
  expect_contains(
      error_of([&] { OnlineCost(flop_fit(flops(), 0.0), bad); }),
      "frameshard::OnlineCost: expected options.window >= 1, got 0");
}

TEST(OnlineCost, PlansWithFlopsWhileWarmingUpThenTakesABetterFit) {
  OnlineCost online(flop_fit(flops(), 0.0));
  const std::vector<int64_t> batch = tied_batch();
  run_calls(online, batch, 4, Truth{}, 0.0, 1, 1);
  EXPECT_FALSE(online.in_force().fitted);
  expect_contains(online.why(), "warming up (1 of 2 calls)");
  run_calls(online, batch, 4, Truth{}, 0.0, 1, 2);
  ASSERT_TRUE(online.in_force().fitted) << online.why();
  expect_contains(
      online.why(), "switched: it explains the times better than FLOPs");
  EXPECT_EQ(online.switches(), 1);
  // Its seconds are the machine's, where FLOPs' are a guess.
  for (const WorkloadSample& s : online.window()) {
    EXPECT_NEAR(online.in_force().predict(s) / s.seconds, 1.0, 1e-6);
  }
}

TEST(OnlineCost, KeepsFlopsWhenTheFitExplainsTheTimesWorse) {
  // A window-attention tower's times follow its FLOPs exactly; the fit has
  // no p * min(p, window) term, so it explains them worse and is not used.
  const CostModel windowed = flop_cost_model(tower_preset("qwen2.5-vl"));
  ASSERT_GT(windowed.window_coef, 0.0);
  OnlineCost online(flop_fit(windowed, 0.0));
  SplitMix64 rng(3);
  for (int i = 0; i < 8; ++i) {
    std::vector<WorkloadSample> call;
    for (int r = 0; r < 4; ++r) {
      std::vector<int64_t> rows = random_units(rng);
      rows.push_back(16 * (1 + r));  // frames under the window: p * p
      WorkloadSample s = workload_sample(rows, windowed, false, 1.0);
      s.seconds = 1e-12 * s.flop_cost;
      call.push_back(s);
    }
    online.record(call);
    online.update(slowest_of(tied_batch(), 4));
  }
  EXPECT_FALSE(online.in_force().fitted);
  expect_contains(online.why(), "the fit explains the times worse than FLOPs");
}

TEST(OnlineCost, NoiseAloneDoesNotMakeThePlansOscillate) {
  // The same batch, call after call, on a machine whose times wander 10 %:
  // once a fit is in force the plan stays put (1 change in 5 x 60 calls).
  for (const uint64_t seed : {11u, 12u, 13u, 14u, 15u}) {
    OnlineCost online(flop_fit(flops(), 0.0));
    const int changes =
        run_calls(online, tied_batch(), 2, Truth{}, 0.10, 60, seed);
    EXPECT_LE(online.switches(), 2) << "seed " << seed << ": " << online.why();
    EXPECT_LE(changes, 1) << "seed " << seed;
  }
}

TEST(OnlineCost, WithoutTheMarginTheSameNoiseMovesThePlan) {
  // The test above could not fail if noise never moved a fit: it does.
  int changes = 0;
  for (const uint64_t seed : {11u, 12u, 13u, 14u, 15u}) {
    OnlineCostOptions eager;
    eager.switch_margin = 0.0;
    eager.noise_margin = 0.0;
    OnlineCost online(flop_fit(flops(), 0.0), eager);
    changes += run_calls(online, tied_batch(), 2, Truth{}, 0.10, 60, seed);
  }
  EXPECT_GE(changes, 10);  // 21 here, against 1 in all with the margins
}

TEST(OnlineCost, RefitsWhenTheMachineBecomesSlower) {
  OnlineCost online(flop_fit(flops(), 0.0));
  Truth truth;
  run_calls(online, tied_batch(), 4, truth, 0.0, 4, 5);
  ASSERT_TRUE(online.in_force().fitted);
  truth.scale = 3.0;  // another dtype, a checkpointed tower, a slower card
  run_calls(online, tied_batch(), 4, truth, 0.0, 20, 6);
  for (const WorkloadSample& s : online.window()) {
    EXPECT_NEAR(online.in_force().predict(s) / s.seconds, 1.0, 1e-6)
        << online.why();
  }
}

TEST(OnlineCost, EqualSamplesGiveBitwiseEqualModels) {
  OnlineCost one(flop_fit(flops(), 0.0)), two(flop_fit(flops(), 0.0));
  run_calls(one, tied_batch(), 4, Truth{}, 0.1, 10, 21);
  run_calls(two, tied_batch(), 4, Truth{}, 0.1, 10, 21);
  EXPECT_EQ(one.in_force().model.a, two.in_force().model.a);
  EXPECT_EQ(one.in_force().model.b, two.in_force().model.b);
  EXPECT_EQ(one.in_force().per_call, two.in_force().per_call);
  EXPECT_EQ(one.why(), two.why());
}

TEST(RankWorkload, CountsEveryFrameTheRankRanIncludingFloorFrames) {
  PlanOptions o;
  o.world = 2;
  o.min_local_patch_rows = 96;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  // 64 rows and 1024 rows: rank 0 pads its 64-row frame up to 96 rows with
  // one floor frame of 64 (the frame's own shape).
  const ShardPlan plan = make_plan({{1, 8, 8}, {1, 32, 32}}, o);
  ASSERT_EQ(plan.path, PlanPath::kSharded);
  const WorkloadSample r0 = rank_workload(plan, 0, flops(), 0.5);
  EXPECT_EQ(r0.frames, 2.0);
  EXPECT_EQ(r0.sum_p, 128.0);
  EXPECT_EQ(r0.sum_p2, 2.0 * 64.0 * 64.0);
  EXPECT_EQ(r0.calls, 1.0);
  EXPECT_EQ(r0.split_calls, 0.0);
  EXPECT_EQ(r0.seconds, 0.5);
  const WorkloadSample r1 = rank_workload(plan, 1, flops(), 0.5);
  EXPECT_EQ(r1.sum_p2, 1024.0 * 1024.0);
  EXPECT_DOUBLE_EQ(r1.flop_cost, flops()(1024));
  const std::string e = error_of([&] { rank_workload(plan, 2, flops(), 0.5); });
  expect_contains(e, "rank_workload");
  expect_contains(e, "expected rank in [0, 2), got 2");
}

TEST(OnlineCost, RecordsOnlyTheRanksThatRanTheTowerFromAnAllGather) {
  OnlineCost online(flop_fit(flops(), 0.0));
  WorkloadSample ran = sample_of({1024}, false);
  ran.seconds = 0.25;
  const WorkloadSample idle;  // a text-only step: seconds 0
  std::vector<double> gathered;
  for (const WorkloadSample& s : {ran, idle, ran}) {
    const auto d = to_doubles(s);
    gathered.insert(gathered.end(), d.begin(), d.end());
  }
  EXPECT_TRUE(online.record_gathered(gathered));
  EXPECT_EQ(online.window().size(), 2u);
  EXPECT_EQ(online.window()[1].sum_p2, ran.sum_p2);
  EXPECT_EQ(online.window()[1].seconds, 0.25);
  const auto none = to_doubles(idle);
  EXPECT_FALSE(online.record_gathered({none.begin(), none.end()}));
  EXPECT_EQ(online.calls(), 1);
  const std::string e = error_of([&] { online.record_gathered({1.0, 2.0}); });
  expect_contains(e, "OnlineCost::record_gathered");
  expect_contains(e, "expected a multiple of 8 doubles, got 2");
}

TEST(OnlineCost, AFitInForcePlansInSecondsWithItsSplitLatency) {
  WorkloadFit fit = fit_workloads(exact_samples(Truth{}, 40));
  PlanOptions o = plan_options_with(fit, PlanOptions{});
  EXPECT_EQ(o.cost.seconds_per_unit, 1.0);
  EXPECT_EQ(o.cost.a, fit.model.a);
  EXPECT_EQ(o.split.exchange_fixed_cost, fit.exchange_fixed);
  EXPECT_NE(o.cost.label.find("online: a="), std::string::npos);
  // The slowest rank the fit predicts is the worst rank's sample.
  o.world = 2;
  const ShardPlan plan = make_plan({{1, 64, 64}, {1, 16, 16}}, o);
  const double worst = std::max(
      fit.predict(rank_workload(plan, 0, flops(), 0.0)),
      fit.predict(rank_workload(plan, 1, flops(), 0.0)));
  EXPECT_EQ(predicted_slowest(plan, fit, flops()), worst);
  EXPECT_GT(worst, 0.0);
}

TEST(OnlineCost, AFitPlansWithItsMeasuredRowExchangeCostAndFlopsWithTheirs) {
  // Options made for the FLOP model hold the per-row exchange cost in FLOP
  // units. A fit plans with the seconds per row it measured; going back to
  // the FLOP model moves the options' cost into FLOP units.
  PlanOptions o;
  o.cost = flops();
  o.split.exchange_row_cost = 1000.0;
  const WorkloadFit fit = fit_workloads(exact_samples(Truth{}, 40));
  const PlanOptions in_seconds = plan_options_with(fit, o);
  EXPECT_EQ(in_seconds.split.exchange_row_cost, fit.exchange_row);
  const PlanOptions back =
      plan_options_with(flop_fit(flops(), 0.0), in_seconds);
  EXPECT_DOUBLE_EQ(
      back.split.exchange_row_cost,
      fit.exchange_row / flops().seconds_per_unit);
  // The FLOP model over its own options changes nothing.
  EXPECT_EQ(
      plan_options_with(flop_fit(flops(), 0.0), o).split.exchange_row_cost,
      1000.0);
}

TEST(OnlineCost, AFitOfWholeFrameCallsCutsWithTheConfiguredSplitCosts) {
  // Whole-frame calls say nothing about the exchange: the fit keeps the
  // configured split costs (latency and per-row cost in FLOP units, now in
  // seconds) instead of zeros that would make every cut free, until a fit
  // that measured split calls explains the window better.
  const double latency = 5e5;  // FLOP units, as PlanOptions::split holds it
  const double row = 1000.0;
  OnlineCost online(flop_fit(flops(), latency, row));
  const Truth truth;
  run_calls(online, tied_batch(), 4, truth, 0.0, 3, 1);
  const WorkloadFit& whole = online.in_force();
  ASSERT_TRUE(whole.fitted) << online.why();
  EXPECT_FALSE(whole.split_measured);
  EXPECT_DOUBLE_EQ(whole.exchange_fixed, latency * flops().seconds_per_unit);
  EXPECT_DOUBLE_EQ(whole.exchange_row, row * whole.flop_seconds_per_unit);
  EXPECT_GT(whole.exchange_row, 0.0);
  expect_contains(whole.describe(), "no split call measured");
  EXPECT_EQ(
      plan_options_with(whole, PlanOptions{}).split.exchange_row_cost,
      whole.exchange_row);

  std::vector<WorkloadSample> call;
  SplitMix64 rng(3);
  for (int r = 0; r < 4; ++r) {
    WorkloadSample s = sample_of(random_units(rng), true);
    s.exchange_rows = 64.0 * (r + 1);
    s.seconds = truth.seconds(s);
    call.push_back(s);
  }
  online.record(call);
  EXPECT_TRUE(online.update(slowest_of(tied_batch(), 4))) << online.why();
  expect_contains(online.why(), "measured the split calls");
  EXPECT_TRUE(online.in_force().split_measured);
  EXPECT_NEAR(online.in_force().exchange_row / truth.kv_row, 1.0, 1e-6);
}

TEST(RankWorkload, CountsAPieceAsTheSplitPlannerCostsIt) {
  // One 4096-row frame and a 256-row one at CP 2: the large frame is cut,
  // each piece's queries attend to all 4096 rows and its holder receives
  // the other piece's K/V.
  const WorkloadFit fit = fit_workloads(exact_samples(Truth{}, 40));
  PlanOptions o;
  o.world = 2;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  o.split.enabled = true;
  o = plan_options_with(fit, o);
  const ShardPlan plan = make_plan({{1, 64, 64}, {1, 16, 16}}, o);
  ASSERT_TRUE(plan.split);
  double rows = 0.0;
  for (int64_t r = 0; r < 2; ++r) {
    const RankShard& rs = plan.ranks[static_cast<size_t>(r)];
    const WorkloadSample s = rank_workload(plan, r, flops(), 0.0);
    ASSERT_FALSE(rs.pieces.empty());
    const double q = static_cast<double>(rs.pieces[0].rows());
    rows += q;
    EXPECT_EQ(s.exchange_rows, static_cast<double>(rs.exchange_rows));
    EXPECT_EQ(s.exchange_rows, 4096.0 - q);
    EXPECT_EQ(s.split_calls, 1.0);
    // The planner's cost of the rank (its pieces and frames, the exchanges'
    // latency) is the fit's prediction of its sample, less the call.
    EXPECT_NEAR(fit.predict(s) - fit.per_call, rs.cost, 1e-9 * rs.cost);
  }
  EXPECT_EQ(rows, 4096.0);
  // A piece's FLOPs are its share of its frame's, plus the frame constant.
  const RankShard& r0 = plan.ranks[0];
  const double q = static_cast<double>(r0.pieces[0].rows());
  const double whole = flops()(4096);
  double want = flops().c + q * (whole - flops().c) / 4096.0;
  for (size_t f = 1; f + 1 < r0.cu_seqlens.size(); ++f) {
    want += flops()(r0.cu_seqlens[f + 1] - r0.cu_seqlens[f]);
  }
  EXPECT_NEAR(
      rank_workload(plan, 0, flops(), 0.0).flop_cost, want, 1e-9 * want);
}

TEST(CallWorkload, NamesAPieceThatIsNotItsSegment) {
  const std::vector<FramePiece> pieces = {FramePiece{0, 0, 100}};
  const std::string e = error_of([&] {
    call_workload({0, 64}, {{1, 16, 16}}, pieces, flops(), true, 1.0);
  });
  expect_contains(e, "frameshard::call_workload: expected pieces[0] (frame 0");
  expect_contains(e, "got 64 segment rows and 256 frame rows");
}

}  // namespace
}  // namespace frameshard
