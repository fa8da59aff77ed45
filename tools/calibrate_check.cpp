#include "calibrate_check.h"

#include <frameshard/models/cost_bridge.h>
#include <frameshard/plan.h>

#include "verify_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace frameshard {
namespace cli {

double predicted_rank_seconds(
    const CostModel& model, const RankShard& rank, double per_call) {
  double s = per_call;
  for (const GridThw& g : rank.grid) {
    s += static_cast<double>(g.t) * model(g.h * g.w);
  }
  return s;
}

namespace {

ShardPlan plan_with(
    const std::vector<GridThw>& grid,
    const MediaLayout& layout,
    const CostModel& cost,
    int64_t cp) {
  PlanOptions o;
  o.world = cp;
  o.layout = layout;
  o.cost = cost;
  o.policy.enabled = true;  // always shard: the check times the shares
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  return make_plan(grid, o);
}

struct Tally {
  double sum_abs = 0.0;
  int ranks = 0;
};

// One preset: per CP size, the calibrated plan's ranks predicted against
// measured, then both plans' slowest measured rank.
void check_preset(
    const models::QwenVisionModel& tower,
    const CostModel& calibrated,
    const CostModel& flop,
    const CheckRequest& req,
    const std::string& preset,
    CheckSummary& sum,
    Tally& tally) {
  WorkloadRequest wr;
  wr.preset = preset;
  wr.max_frame_patches = req.max_frame_patches;
  wr.max_patches = req.max_patches;
  const ResolvedWorkload wl = resolve_workload(wr);
  const std::vector<GridThw>& grid = wl.workload.grid;
  const MediaLayout layout = models::media_layout(tower.config);
  const at::Tensor pixels = random_pixels(tower, grid);
  std::printf("\n%s\n", wl.display_label().c_str());
  std::printf(
      "%4s %4s %6s %7s %12s %12s %8s\n",
      "cp",
      "rank",
      "frames",
      "rows",
      "predicted_ms",
      "measured_ms",
      "error");
  for (int64_t cp : req.cps) {
    const ShardPlan cal = plan_with(grid, layout, calibrated, cp);
    const ShardPlan fl = plan_with(grid, layout, flop, cp);
    const std::vector<double> t_cal =
        time_rank_shares(tower, cal, pixels, req.run);
    // The same partition runs the same shares: time it once.
    const bool same = cal.partition.assignment == fl.partition.assignment;
    const std::vector<double> t_flop =
        same ? t_cal : time_rank_shares(tower, fl, pixels, req.run);
    for (int64_t r = 0; r < cp; ++r) {
      const RankShard& rs = cal.ranks[r];
      const double pred = predicted_rank_seconds(calibrated, rs, req.per_call);
      const double err = pred / t_cal[r] - 1.0;
      sum.max_abs_error = std::max(sum.max_abs_error, std::fabs(err));
      tally.sum_abs += std::fabs(err);
      tally.ranks += 1;
      std::printf(
          "%4lld %4lld %6zu %7lld %12.2f %12.2f %+7.1f%%\n",
          static_cast<long long>(cp),
          static_cast<long long>(r),
          rs.units.size(),
          static_cast<long long>(rs.local_patch_rows),
          pred * 1e3,
          t_cal[r] * 1e3,
          err * 100.0);
    }
    const double max_cal = *std::max_element(t_cal.begin(), t_cal.end());
    const double max_flop = *std::max_element(t_flop.begin(), t_flop.end());
    // 2 %: the timing noise of one rank's median on a shared CPU.
    const bool not_worse = max_cal <= max_flop * 1.02;
    sum.plans += 1;
    sum.plans_not_worse += not_worse ? 1 : 0;
    std::printf(
        "%4lld slowest rank measured: calibrated plan %.2f ms, FLOP plan "
        "%.2f ms (%+.1f%%)%s\n",
        static_cast<long long>(cp),
        max_cal * 1e3,
        max_flop * 1e3,
        (max_cal / max_flop - 1.0) * 100.0,
        same ? "  same partition" : (not_worse ? "" : "  WORSE"));
    std::fflush(stdout);
  }
}

}  // namespace

CheckSummary run_calibration_check(
    const models::QwenVisionModel& tower,
    const CostModel& calibrated,
    const CostModel& flop,
    const CheckRequest& request) {
  std::printf(
      "\ncheck: per-rank time predicted by %s against measured (one rank "
      "after another), and the slowest rank of the plan made with %s\n",
      calibrated.label.c_str(),
      flop.label.c_str());
  CheckSummary sum;
  Tally tally;
  for (const std::string& preset : request.presets) {
    check_preset(tower, calibrated, flop, request, preset, sum, tally);
  }
  sum.mean_abs_error =
      tally.ranks > 0 ? tally.sum_abs / static_cast<double>(tally.ranks) : 0.0;
  std::printf(
      "\ncheck summary: per-rank error max %.1f%%, mean %.1f%% (target "
      "10%%); calibrated plan not worse than the FLOP plan in %d of %d\n",
      sum.max_abs_error * 100.0,
      sum.mean_abs_error * 100.0,
      sum.plans_not_worse,
      sum.plans);
  return sum;
}

}  // namespace cli
}  // namespace frameshard
