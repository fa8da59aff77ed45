// What `frameshard train` and `frameshard ab` print (rank 0): a progress
// line per step under a progress bar, the summary table, and the --json
// object. A step's time is the slowest rank's (the ranks wait for each
// other in the step's collectives); averages leave out step 0, the warm-up
// (first-touch allocations, thread pools), when there are 2 steps or more.
// A step's frames and rows (all uses, and the distinct ones the arm
// encodes: frame_sharding.dedup) are the job's: the sum over the DP
// replicas of one rank's count each (trainer.h, StepMetrics).
#pragma once

#include <frameshard/online_cost.h>
#include <frameshard/train/ab_plot.h>
#include <frameshard/train/trainer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// Every rank's metrics of every step of one arm: steps[s][rank].
struct ArmRecord {
  std::string name;  // "sharded", "replicated", "rank-local", "train"
  std::vector<std::vector<train::StepMetrics>> steps;
  int64_t cp = 1;      // ranks per DP replica (global rank = replica * cp + c)
  bool dedup = false;  // the arm encodes each distinct frame once
  // cost_alpha online: the model after the last step (rank 0's; empty
  // without online). Reports print its fit; --write-cost writes it.
  std::optional<OnlineCost> online;
};

struct ArmSummary {
  int64_t measured_steps = 0;   // steps averaged (all but the warm-up)
  double step_seconds = 0.0;    // mean over measured steps of the max
  double vision_seconds = 0.0;  //   over ranks
  double vision_cpu_seconds = 0.0;
  // The straggler gap between DP replicas: per step, a replica's vision
  // time is its slowest rank's, the gap the slowest replica's minus the
  // fastest's (0 with one replica); wall and thread CPU time.
  double replica_gap_seconds = 0.0;
  double replica_gap_cpu_seconds = 0.0;
  double gather_seconds = 0.0;
  double decoder_seconds = 0.0;
  int64_t peak_bytes = 0;         // max over steps and ranks
  int64_t vision_peak_bytes = 0;  // max over steps and ranks
  std::vector<int64_t> peak_bytes_per_rank;
  std::vector<int64_t> tower_rows_per_rank;  // of the last step
  // Visual bytes received per step (mean over steps of the largest rank's)
  // and their total over steps and ranks against what the all-gather would
  // have moved.
  double visual_bytes_per_step = 0.0;
  int64_t visual_bytes_total = 0;
  int64_t allgather_bytes_total = 0;
  std::string plan_path;      // of the last step
  double hash_seconds = 0.0;  // frame_keys (dedup), slowest rank
  // The job's frame units and patch rows per step, all uses and distinct,
  // means over every step (counts, not times: no warm-up to leave out).
  double frames_total = 0.0;
  double frames_distinct = 0.0;
  double rows_total = 0.0;
  double rows_distinct = 0.0;
  // Sharded steps over the dp x cp mesh by the plan they ran (MeshMode),
  // and the mean predicted gain of the weighed ones (policy auto).
  int64_t mesh_steps = 0;
  int64_t cp_only_steps = 0;
  double mesh_gain = 0.0;
};

ArmSummary summarize(const ArmRecord& arm);

/// The job's count of one step (sum over the replicas, cp rank 0 of each).
int64_t job_count(
    const ArmRecord& arm,
    const std::vector<train::StepMetrics>& ranks,
    int64_t train::StepMetrics::*field);

/// Per step of the arm, the largest value of a field over its ranks.
template <typename F>
std::vector<double> per_step_max(const ArmRecord& arm, F field) {
  std::vector<double> v;
  for (const auto& ranks : arm.steps) {
    double m = 0.0;
    for (const auto& r : ranks) {
      m = std::max(m, static_cast<double>(field(r)));
    }
    v.push_back(m);
  }
  return v;
}

/// "[######----] step 4/30 sharded  loss 5.5012  step 1.21 s  vision ...";
/// with `dedup`, the job's distinct and total frames at the end ("frames
/// 41/328 distinct").
std::string progress_line(
    const std::string& arm,
    const std::vector<train::StepMetrics>& ranks,
    int64_t total_steps,
    bool dedup = false,
    int64_t cp = 1);

void print_train_summary(std::ostream& os, const ArmRecord& arm);
void print_ab_summary(
    std::ostream& os, const ArmRecord& replicated, const ArmRecord& sharded);

/// Per arm: plan_path, step_seconds, vision_seconds, vision_cpu_seconds,
/// gather_seconds, decoder_seconds (per step, slowest rank), peak_bytes (per
/// step, max over ranks), peak_bytes_per_rank, losses,
/// vision_seconds_per_rank and vision_cpu_seconds_per_rank (per step, per
/// rank), visual_bytes_received (per step, per rank), visual_bytes_ratio
/// (received over what the all-gather would move; 1 for gather: all, 0 when
/// nothing moved or on the mesh path, which has no all-gather), cp, and the
/// summary means (with the replica gaps); name, dedup, hash_seconds, and
/// per step the job's frames_total, frames_distinct, rows_total and
/// rows_distinct, with their ratio distinct_rows_ratio (distinct over total
/// rows, all steps); per step mesh_mode ("mesh", "cp-only" or "") and
/// mesh_gain, and mesh_steps, cp_only_steps, mean_mesh_gain. Defined in
/// tools/train_json.cpp.
nlohmann::json arm_json(const ArmRecord& arm);
/// {"replicated": arm, "sharded": arm, "vision_time_ratio",
/// "vision_cpu_time_ratio", "step_time_ratio",
/// "gather_time_ratio", "peak_bytes_ratio", "vision_peak_bytes_ratio",
/// "loss_max_abs_diff"}; ratios are sharded over replicated. The second
/// arm's key is "sharded" whatever its name (its "name": "rank-local" for
/// AReaL's rank-local dedup, train_launch.cpp).
nlohmann::json ab_json(const ArmRecord& replicated, const ArmRecord& sharded);

/// The arm's per-step losses and step times (slowest rank), as plotted.
train::PlotSeries plot_series(const ArmRecord& arm);

/// Largest |loss_sharded - loss_replicated| over the steps.
double loss_max_abs_diff(const ArmRecord& a, const ArmRecord& b);

}  // namespace cli
}  // namespace frameshard
