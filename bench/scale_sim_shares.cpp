#include "scale_sim_shares.h"

#include "tower_timing.h"

#include <frameshard/config.h>
#include <frameshard/models/cost_bridge.h>
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
  const double bw = req.bandwidth_gbps * 1e9;
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
  for (int64_t cp : req.cps) {
    std::vector<std::pair<ShardPlan, std::vector<double>>> timed;
    nlohmann::json at_cp = {{"cp", cp}, {"arms", nlohmann::json::array()}};
    for (const Arm& arm : arms_at(cp, req, m)) {
      const ShardPlan plan = make_plan(grid, arm.options);
      const std::vector<double> t =
          rank_times(plan, pixels, m, req.repeats, timed);
      double slowest = 0.0, compute = 0.0, sum = 0.0;
      int64_t received = 0;
      for (size_t r = 0; r < t.size(); ++r) {
        const double exchange =
            static_cast<double>(plan.ranks[r].exchange_rows * kv_row_bytes) /
            bw;
        slowest = std::max(slowest, t[r] + exchange);
        compute = std::max(compute, t[r]);
        sum += t[r];
        if (plan.sharded()) {
          received =
              std::max(received, frames.total_tokens - plan.gather_counts[r]);
        }
      }
      const double gather = static_cast<double>(received * row_bytes) / bw;
      const double speedup = t_rep / (slowest + gather);
      const double imbalance = compute / (sum / static_cast<double>(t.size()));
      size_t pieces = 0;
      for (const RankShard& rs : plan.ranks) {
        pieces += rs.pieces.size();
      }
      std::printf(
          "%4lld %-10s %-10s %8.2f %7.2f %6.2f %7.2f ",
          static_cast<long long>(cp),
          arm.name.c_str(),
          arm.cost.c_str(),
          (slowest + gather) * 1e3,
          speedup,
          imbalance,
          sum / t_rep);
      for (double s : t) {
        std::printf(" %.2f", s * 1e3);
      }
      std::printf("\n");
      at_cp["arms"].push_back(
          {{"arm", arm.name},
           {"cost", arm.cost},
           {"rank_s", t},
           {"slowest_s", compute},
           {"modelled_transfer_s", slowest + gather - compute},
           {"speedup", speedup},
           {"imbalance", imbalance},
           {"sum_over_replicated", sum / t_rep},
           {"pieces", pieces}});
    }
    std::fflush(stdout);
    out["cps"].push_back(at_cp);
  }
  return out;
}

}  // namespace bench
}  // namespace frameshard
