#include "scale_sim_shares.h"

#include "tower_timing.h"

#include <frameshard/config.h>
#include <frameshard/models/cost_bridge.h>
#include <frameshard/online_cost.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/encode.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace frameshard {
namespace bench {
namespace {

struct Arm {
  std::string name;  // partitioner, or "split"
  std::string cost;  // "flop" | "calibrated"
  PlanOptions options;
};

// Every partitioner and split, under each cost model: the options a
// config with that cost_alpha gives ("auto": the FLOP model; a calibrate
// file: its cost and, in its units, the split exchange's price).
std::vector<Arm> arms_at(
    int64_t cp, const SharesRequest& req, const models::QwenVisionModel& m) {
  std::vector<std::pair<std::string, std::string>> costs{{"flop", "auto"}};
  if (!req.cost_alpha.empty()) {
    costs.emplace_back("calibrated", req.cost_alpha);
  }
  std::vector<Arm> arms;
  for (const auto& [cost_name, cost_alpha] : costs) {
    Config cfg;
    cfg.frame_sharding.cost_alpha = cost_alpha;
    PlanOptions o = plan_options(cfg, models::tower_dims(m.config));
    o.world = cp;
    o.layout = models::media_layout(m.config);
    o.policy.enabled = true;
    o.policy.min_tokens = 0;
    o.policy.min_frames = 0;
    o.split.enabled = false;
    for (Partitioner p : all_partitioners()) {
      o.partitioner = p;
      arms.push_back({to_string(p), cost_name, o});
    }
    o.partitioner = Partitioner::kOptimal;
    o.split.enabled = true;
    arms.push_back({"split", cost_name, o});
  }
  return arms;
}

// Seconds per rank of `plan`, reusing the times of an earlier plan that
// gave every rank the same whole frames.
std::vector<double> rank_times(
    const ShardPlan& plan,
    const at::Tensor& pixels,
    const models::QwenVisionModel& m,
    int repeats,
    std::vector<std::pair<ShardPlan, std::vector<double>>>& timed) {
  if (!plan.split) {
    for (const auto& [earlier, times] : timed) {
      if (!earlier.split &&
          earlier.partition.assignment == plan.partition.assignment) {
        return times;
      }
    }
  }
  std::vector<double> times =
      cli::time_rank_shares(m, plan, pixels, {repeats, false, false});
  timed.emplace_back(plan, times);
  return times;
}

// What the table adds to the measured rank times: the replicated time, and
// the K/V exchange and gather modelled from bytes and a bandwidth.
struct Modelled {
  double replicated_s = 0.0;
  int64_t kv_row_bytes = 0;  // K and V of one row, every full-attention layer
  int64_t row_bytes = 0;     // one gathered output row, every output
  double bytes_per_s = 0.0;
};

// One row of the table (printed) and its figures: `t` is every rank's
// measured share of `plan`.
nlohmann::json arm_row(
    const Arm& arm,
    const ShardPlan& plan,
    const std::vector<double>& t,
    const FrameSet& frames,
    const Modelled& model) {
  double slowest = 0.0, compute = 0.0, sum = 0.0;
  int64_t received = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    const double exchange =
        static_cast<double>(plan.ranks[r].exchange_rows * model.kv_row_bytes) /
        model.bytes_per_s;
    slowest = std::max(slowest, t[r] + exchange);
    compute = std::max(compute, t[r]);
    sum += t[r];
    if (plan.sharded()) {
      received =
          std::max(received, frames.total_tokens - plan.gather_counts[r]);
    }
  }
  const double gather =
      static_cast<double>(received * model.row_bytes) / model.bytes_per_s;
  const double speedup = model.replicated_s / (slowest + gather);
  const double imbalance = compute / (sum / static_cast<double>(t.size()));
  size_t pieces = 0;
  for (const RankShard& rs : plan.ranks) {
    pieces += rs.pieces.size();
  }
  std::printf(
      "%4lld %-10s %-10s %8.2f %7.2f %6.2f %7.2f ",
      static_cast<long long>(plan.options.world),
      arm.name.c_str(),
      arm.cost.c_str(),
      (slowest + gather) * 1e3,
      speedup,
      imbalance,
      sum / model.replicated_s);
  for (double s : t) {
    std::printf(" %.2f", s * 1e3);
  }
  std::printf("\n");
  return {
      {"arm", arm.name},
      {"cost", arm.cost},
      {"rank_s", t},
      {"slowest_s", compute},
      {"modelled_transfer_s", slowest + gather - compute},
      {"speedup", speedup},
      {"imbalance", imbalance},
      {"sum_over_replicated", sum / model.replicated_s},
      {"pieces", pieces}};
}

// cost_alpha online as a run learns it, on this one batch: plan with the
// fit in force, time every rank's share (plus its modelled K/V exchange:
// what a rank's clock would see), record the samples, update; `rounds`
// times. The row is the last round's plan; "curve" the slowest rank over
// the ideal (replicated / cp) of every round, warm-up included.
nlohmann::json online_arm(
    const Arm& flop_split,
    const SharesRequest& req,
    const std::vector<GridThw>& grid,
    const at::Tensor& pixels,
    const models::QwenVisionModel& m,
    const FrameSet& frames,
    const Modelled& model,
    std::vector<std::pair<ShardPlan, std::vector<double>>>& timed) {
  const PlanOptions& base = flop_split.options;
  OnlineCost online(flop_fit(base));
  const double ideal = model.replicated_s / static_cast<double>(base.world);
  std::vector<double> curve;
  nlohmann::json row;
  for (int round = 0; round < req.online_rounds; ++round) {
    const ShardPlan plan =
        make_plan(grid, plan_options_with(online.in_force(), base));
    const std::vector<double> t =
        rank_times(plan, pixels, m, req.repeats, timed);
    std::vector<WorkloadSample> call;
    double slowest = 0.0;
    for (size_t r = 0; r < t.size(); ++r) {
      const double seconds =
          t[r] + static_cast<double>(
                     plan.ranks[r].exchange_rows * model.kv_row_bytes) /
                     model.bytes_per_s;
      slowest = std::max(slowest, seconds);
      call.push_back(
          rank_workload(plan, static_cast<int64_t>(r), base.cost, seconds));
    }
    curve.push_back(slowest / ideal);
    online.record(call);
    online.update([&](const WorkloadFit& plan_with, const WorkloadFit& judge) {
      return predicted_slowest(
          make_plan(grid, plan_options_with(plan_with, base)),
          judge,
          base.cost);
    });
    if (round + 1 == req.online_rounds) {
      row = arm_row({"split", "online", base}, plan, t, frames, model);
    }
  }
  std::printf("     online, slowest / ideal by round:");
  for (double c : curve) {
    std::printf(" %.2f", c);
  }
  std::printf(
      "\n     fit in force: %s\n", online.in_force().describe().c_str());
  row["curve_over_ideal"] = curve;
  row["fit"] = online.in_force().describe();
  return row;
}

}  // namespace

nlohmann::json simulate_shares(
    const SharesRequest& req,
    const std::string& label,
    const std::vector<GridThw>& grid,
    const models::QwenVisionModel& m) {
  const FrameSet frames = expand_frames(grid, models::media_layout(m.config));
  const at::Tensor pixels = cli::random_pixels(m, grid);
  const TowerInput all = whole_frames_input(pixels, grid);
  cli::time_tower(m, all, {1, false, false});  // warm-up
  const double t_rep = cli::time_tower(m, all, {req.repeats, false, false});
  const int64_t elem = static_cast<int64_t>(pixels.element_size());
  const int64_t row_bytes =
      elem * m.config.out_hidden_size() *
      static_cast<int64_t>(m.config.output_names().size());
  const TowerDims dims = models::tower_dims(m.config);
  // K and V of one row per full-attention layer.
  const int64_t kv_row_bytes = 2 * dims.hidden * elem * dims.full_layers();
  std::printf(
      "\n%s: %lld patch rows, %lld frame units, replicated %.3f ms\n"
      "%4s %-10s %-10s %8s %7s %6s %7s  rank ms\n",
      label.c_str(),
      static_cast<long long>(frames.total_patch_rows),
      static_cast<long long>(frames.units.size()),
      t_rep * 1e3,
      "cp",
      "arm",
      "cost",
      "slow_ms",
      "speedup",
      "imbal",
      "sum/rep");
  nlohmann::json out = {
      {"label", label},
      {"patch_rows", frames.total_patch_rows},
      {"frame_units", frames.units.size()},
      {"replicated_s", t_rep},
      {"cps", nlohmann::json::array()}};
  const Modelled model{
      t_rep, kv_row_bytes, row_bytes, req.bandwidth_gbps * 1e9};
  for (int64_t cp : req.cps) {
    std::vector<std::pair<ShardPlan, std::vector<double>>> timed;
    nlohmann::json at_cp = {{"cp", cp}, {"arms", nlohmann::json::array()}};
    const std::vector<Arm> arms = arms_at(cp, req, m);
    for (const Arm& arm : arms) {
      const ShardPlan plan = make_plan(grid, arm.options);
      const std::vector<double> t =
          rank_times(plan, pixels, m, req.repeats, timed);
      at_cp["arms"].push_back(arm_row(arm, plan, t, frames, model));
    }
    if (req.online_rounds > 0) {
      // The FLOP split arm's options: what cost_alpha online starts from.
      const Arm& flop_split =
          *std::find_if(arms.begin(), arms.end(), [](const Arm& a) {
            return a.name == "split" && a.cost == "flop";
          });
      at_cp["arms"].push_back(
          online_arm(flop_split, req, grid, pixels, m, frames, model, timed));
    }
    std::fflush(stdout);
    out["cps"].push_back(at_cp);
  }
  return out;
}

}  // namespace bench
}  // namespace frameshard
