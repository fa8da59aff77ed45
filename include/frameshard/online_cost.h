// File: frameshard/online_cost.h
//
// cost_alpha: online -- a cost model that learns from the run's own tower
// times instead of a separate calibration.
//
// Each sharded call, every rank times its tower (forward plus backward) and
// describes its workload by six features: over its frame units of p rows,
// sum p^2, sum p and the frames (a piece of q rows of a split frame of p
// rows counts q p, q and 1: its queries attend to the whole frame); its tower
// calls; whether its plan cut frames (1 per split call, for the K/V
// exchanges' fixed latency); and the K/V rows it receives for its pieces
// (p - q each). The caller shares every rank's samples (one small
// all-gather), so every rank records the same numbers in the same order and
// computes the same fit in float64: the plans stay bitwise identical across
// ranks without more communication. The fit, by non-negative least squares
// on relative errors (the calibration's, frameshard/calibrate.h):
//
//   seconds = a sum p^2 + b sum p + c frames + per_call calls
//             + exchange_fixed split_calls + exchange_row exchange_rows,
//                                                 all coefficients >= 0
//
// -- the split planner's own piece cost (frameshard/split_plan.h), so the
// plan weighs a cut with what the run measured --
// over a window of recent samples, outliers rejected (a relative residual
// beyond `outlier_mads` scaled median absolute deviations, and never one
// under `min_outlier`: a straggling call does not bend it). When it is used:
//   - never while warming up (the first `warmup_calls` calls plan with the
//     FLOP model), nor when it explains the window worse than the FLOP model
//     does at the FLOP model's best seconds-per-unit;
//   - in place of the FLOP model as soon as it explains the times better
//     (the FLOP model's seconds are a guess: kAssumedTowerFlops);
//   - with the start's split costs (the configured latency and per-row
//     exchange cost, in seconds) while its window holds no split call: a
//     fit of whole-frame calls cannot see the exchange, and zeros would
//     make every cut look free; the first fit that measured split calls
//     replaces such a fit as soon as it explains the window better;
//   - in place of an earlier fit only when it pays: its plan of the latest
//     batch predicts a slowest rank at least `switch_margin` faster than
//     the plan in force, both judged by the new fit (the best estimate of
//     the truth) and by more than `noise_margin` times the new fit's rms
//     error (a gain within the times' own noise is none), or the fit in
//     force mispredicts the window by more than
//     `refit_error` (rms) where the new one does not (a changed dtype or
//     device: the seconds the mesh's policy compares went stale). Noise
//     moves a fit a little; the plan moves only when that pays more.
//
// Usage (every rank, the same calls in the same order):
//   frameshard::OnlineCost online(frameshard::flop_fit(flop_plan_options));
//   for each step:
//     plan with online.in_force().model; run; time the tower;
//     online.record(every_ranks_sample);   // one call's, in rank order
//     online.update(slowest);              // may switch; online.why()
//   // at the end: calibration_text(online.in_force().model, ...)
//
// Pure: no clock, no communication (the caller times and gathers). An
// OnlineCost is not thread-safe; the free functions are.
#pragma once

#include <frameshard/cost.h>
#include <frameshard/plan.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace frameshard {

/// One rank's workload in one call and the seconds its tower took.
struct WorkloadSample {
  double sum_p2 = 0.0;       // sum over its units of p^2
  double sum_p = 0.0;        // sum over its units of p
  double frames = 0.0;       // units (frames and frame pieces)
  double calls = 0.0;        // tower calls (1 for a rank with work)
  double split_calls = 0.0;  // 1 when its plan cut frames, else 0
  /// K/V rows it receives per full-attention layer: over its pieces, the
  /// whole frame's rows less the piece's.
  double exchange_rows = 0.0;
  /// The FLOP model's cost of the same units, in its own units (the window
  /// term included), to compare the fit against.
  double flop_cost = 0.0;
  double seconds = 0.0;  // forward plus backward
};

/// The sample of one rank's units: their patch rows (each unit p rows,
/// whole frames).
WorkloadSample workload_sample(
    const std::vector<int64_t>& unit_rows,
    const CostModel& flops,
    bool split,
    double seconds);

/// The sample of one tower call's input (frameshard/tower.h TowerInput):
/// its segments `cu` (one per local frame), its local `grid` (a piece's
/// frame has its own row, the whole frame's geometry) and its `pieces`.
/// A piece of q rows of a p-row frame counts as the split planner costs it
/// (q p, q, 1 and p - q K/V rows received); its FLOP cost is the frame's
/// per-row cost times q plus the per-frame constant. Throws
/// frameshard::Error naming a piece that does not match its segment.
WorkloadSample call_workload(
    const std::vector<int64_t>& cu,
    const std::vector<GridThw>& grid,
    const std::vector<FramePiece>& pieces,
    const CostModel& flops,
    bool split,
    double seconds);

/// The rows of each segment of cu_seqlens (`cu`: 0, then running sums):
/// cu[i + 1] - cu[i]; empty for fewer than 2 entries.
std::vector<int64_t> segment_rows(const std::vector<int64_t>& cu);

/// The sample of `rank` in `plan`: the frames its tower ran (call_workload
/// of its cu_seqlens, grid and pieces: real frames and pieces, floor and
/// dummy frames), split when the plan cut frames (every rank then joins the
/// exchanges).
WorkloadSample rank_workload(
    const ShardPlan& plan,
    int64_t rank,
    const CostModel& flops,
    double seconds);

/// A sample as the doubles one all-gather shares (field order of
/// WorkloadSample), and back.
constexpr std::size_t kWorkloadSampleDoubles = 8;
std::array<double, kWorkloadSampleDoubles> to_doubles(const WorkloadSample& s);
WorkloadSample from_doubles(const double* d);

struct OnlineCostOptions {
  int64_t window = 64;          // most recent rank samples fitted
  int64_t warmup_calls = 2;     // calls planned with FLOPs before a fit
  double outlier_mads = 4.0;    // outlier: beyond this many scaled MADs
  double min_outlier = 0.05;    // and beyond this relative residual
  double switch_margin = 0.03;  // a new fit's plan must gain this much,
  double noise_margin = 1.0;    // and this many times the fit's rms error
  double refit_error = 0.25;    // or the fit in force be this wrong (rms)
};

/// A fitted model in seconds, or the FLOP model it starts from.
struct WorkloadFit {
  CostModel model;              // a, b, c per unit (seconds when fitted)
  double per_call = 0.0;        // seconds per tower call
  double exchange_fixed = 0.0;  // seconds a split call adds (cost units)
  double exchange_row = 0.0;    // seconds per K/V row received (fitted)
  bool fitted = false;          // false: the FLOP model (flop_fit)
  /// A fitted sample had a split call: exchange_fixed and exchange_row are
  /// measured; else they are the start's (OnlineCost).
  bool split_measured = false;
  double rms_relative_error = 0.0;  // on the samples it was fitted to
  /// The FLOP model on the same samples, at its best seconds per unit.
  double flop_rms_relative_error = 0.0;
  double flop_seconds_per_unit = 0.0;
  int64_t used = 0;      // samples fitted
  int64_t rejected = 0;  // outliers left out

  /// Predicted seconds of a sample (the FLOP model: flop_cost times its
  /// seconds per unit).
  double predict(const WorkloadSample& s) const;
  /// "online: a=.. b=.. c=.. per_call=.. split=.. kv_row=.. s (rms 2.1 %, FLOPs
  /// 14.0 %, 48 samples, 1 rejected)", or the FLOP model's label.
  std::string describe() const;
};

/// The FLOP model as the starting point: `flops` (its seconds_per_unit,
/// > 0: the config gives a bare alpha its tower's FLOP units), the split
/// latency and the per-row exchange cost in its units (PlanOptions::split's
/// exchange_fixed_cost and exchange_row_cost): a fit without split calls
/// plans cuts with them.
WorkloadFit flop_fit(
    const CostModel& flops, double exchange_fixed, double exchange_row = 0.0);
/// The same from the options a FLOP plan is made with: their cost model and
/// split costs (what every caller of cost_alpha online starts from).
WorkloadFit flop_fit(const PlanOptions& flop_plan);

/// Fits the model of the banner to `samples` (at least one; every seconds
/// finite and > 0, every feature finite and >= 0), rejecting outliers.
/// Throws frameshard::Error naming the sample and field.
WorkloadFit fit_workloads(
    const std::vector<WorkloadSample>& samples,
    const OnlineCostOptions& options = {});

/// `options` planning with `fit`: its model (seconds once fitted), its
/// split latency as split.exchange_fixed_cost, and as
/// split.exchange_row_cost its fitted seconds per K/V row, or (the FLOP
/// model) the options' own moved from the units of options.cost into the
/// fit's (seconds_per_unit).
PlanOptions plan_options_with(const WorkloadFit& fit, PlanOptions options);

/// The slowest rank of `plan` as `judge` predicts it (seconds).
double predicted_slowest(
    const ShardPlan& plan, const WorkloadFit& judge, const CostModel& flops);

class OnlineCost {
 public:
  /// slowest(plan_with, judge): the caller plans its latest batch with
  /// plan_with and returns the slowest rank's seconds as judge predicts it.
  using Slowest = std::function<double(
      const WorkloadFit& plan_with, const WorkloadFit& judge)>;

  explicit OnlineCost(WorkloadFit start, OnlineCostOptions options = {});

  /// Records one call: every rank's sample, in rank order. Throws
  /// frameshard::Error for an empty call or a bad sample.
  void record(const std::vector<WorkloadSample>& call);
  /// record() of the samples of ranks that ran the tower (seconds > 0)
  /// out of an all-gather's doubles (kWorkloadSampleDoubles per rank);
  /// false, nothing recorded, when none did (a text-only step).
  bool record_gathered(const std::vector<double>& gathered);
  /// Fits the window and switches the model in force when the banner's
  /// rules say so; true on a switch. why() says what it decided.
  bool update(const Slowest& slowest);

  const WorkloadFit& in_force() const {
    return in_force_;
  }
  const WorkloadFit& candidate() const {
    return candidate_;
  }
  const std::string& why() const {
    return why_;
  }
  int64_t calls() const {
    return calls_;
  }
  int64_t switches() const {
    return switches_;
  }
  const std::deque<WorkloadSample>& window() const {
    return window_;
  }

 private:
  OnlineCostOptions options_;
  WorkloadFit start_;  // the FLOP model and its split costs
  WorkloadFit in_force_;
  WorkloadFit candidate_;
  std::deque<WorkloadSample> window_;
  std::string why_ = "warming up";
  int64_t calls_ = 0;
  int64_t switches_ = 0;
};

}  // namespace frameshard
