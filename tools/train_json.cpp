// The --json object of `train` and `ab` (train_report.h).
#include "train_report.h"

#include "online_report.h"

#include <vector>

namespace frameshard {
namespace cli {
namespace {

template <typename F>
std::vector<std::vector<double>> per_rank(const ArmRecord& arm, F field) {
  std::vector<std::vector<double>> v;
  for (const auto& ranks : arm.steps) {
    v.emplace_back();
    for (const auto& m : ranks) {
      v.back().push_back(static_cast<double>(field(m)));
    }
  }
  return v;
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

// The job's frames and rows per step, all uses and distinct (dedup).
void add_frames(nlohmann::json& j, const ArmRecord& arm, const ArmSummary& s) {
  using M = train::StepMetrics;
  std::vector<int64_t> frames, frames_distinct, rows, rows_distinct;
  int64_t all_rows = 0, all_distinct = 0;
  for (const auto& ranks : arm.steps) {
    frames.push_back(job_count(arm, ranks, &M::frames_total));
    frames_distinct.push_back(job_count(arm, ranks, &M::frames_distinct));
    rows.push_back(job_count(arm, ranks, &M::rows_total));
    rows_distinct.push_back(job_count(arm, ranks, &M::rows_distinct));
    all_rows += rows.back();
    all_distinct += rows_distinct.back();
  }
  j["name"] = arm.name;
  j["dedup"] = arm.dedup;
  j["hash_seconds"] =
      per_step_max(arm, [](const auto& m) { return m.hash_seconds; });
  j["mean_hash_seconds"] = s.hash_seconds;
  j["frames_total"] = frames;
  j["frames_distinct"] = frames_distinct;
  j["rows_total"] = rows;
  j["rows_distinct"] = rows_distinct;
  j["distinct_rows_ratio"] =
      ratio(static_cast<double>(all_distinct), static_cast<double>(all_rows));
}

// The mesh's per-step choice: the plan each step ran and its predicted gain.
void add_mesh(nlohmann::json& j, const ArmRecord& arm, const ArmSummary& s) {
  std::vector<std::string> modes;
  std::vector<double> gains;
  for (const auto& ranks : arm.steps) {
    modes.push_back(ranks.front().mesh_mode);
    gains.push_back(ranks.front().mesh_gain);
  }
  j["mesh_mode"] = modes;
  j["mesh_gain"] = gains;
  j["mesh_steps"] = s.mesh_steps;
  j["cp_only_steps"] = s.cp_only_steps;
  j["mean_mesh_gain"] = s.mesh_gain;
}

}  // namespace

nlohmann::json arm_json(const ArmRecord& arm) {
  const ArmSummary s = summarize(arm);
  nlohmann::json j;
  j["plan_path"] = s.plan_path;
  j["step_seconds"] =
      per_step_max(arm, [](const auto& m) { return m.step_seconds; });
  j["vision_seconds"] =
      per_step_max(arm, [](const auto& m) { return m.vision_seconds; });
  j["vision_cpu_seconds"] =
      per_step_max(arm, [](const auto& m) { return m.vision_cpu_seconds; });
  j["vision_seconds_per_rank"] =
      per_rank(arm, [](const auto& m) { return m.vision_seconds; });
  j["vision_cpu_seconds_per_rank"] =
      per_rank(arm, [](const auto& m) { return m.vision_cpu_seconds; });
  j["gather_seconds"] =
      per_step_max(arm, [](const auto& m) { return m.gather_seconds; });
  j["decoder_seconds"] =
      per_step_max(arm, [](const auto& m) { return m.decoder_seconds; });
  j["peak_bytes"] =
      per_step_max(arm, [](const auto& m) { return m.peak_bytes; });
  j["vision_peak_bytes"] =
      per_step_max(arm, [](const auto& m) { return m.vision_peak_bytes; });
  j["losses"] = plot_series(arm).loss;
  std::vector<std::vector<int64_t>> received;
  for (const auto& ranks : arm.steps) {
    received.emplace_back();
    for (const auto& m : ranks) {
      received.back().push_back(m.visual_bytes_received);
    }
  }
  j["visual_bytes_received"] = received;
  j["visual_bytes_ratio"] = ratio(
      static_cast<double>(s.visual_bytes_total),
      static_cast<double>(s.allgather_bytes_total));
  j["peak_bytes_per_rank"] = s.peak_bytes_per_rank;
  j["tower_rows_per_rank"] = s.tower_rows_per_rank;
  j["mean_step_seconds"] = s.step_seconds;
  j["mean_vision_seconds"] = s.vision_seconds;
  j["mean_vision_cpu_seconds"] = s.vision_cpu_seconds;
  j["mean_replica_gap_seconds"] = s.replica_gap_seconds;
  j["mean_replica_gap_cpu_seconds"] = s.replica_gap_cpu_seconds;
  j["cp"] = arm.cp;
  j["mean_gather_seconds"] = s.gather_seconds;
  j["max_peak_bytes"] = s.peak_bytes;
  j["max_vision_peak_bytes"] = s.vision_peak_bytes;
  j["measured_steps"] = s.measured_steps;
  add_frames(j, arm, s);
  add_mesh(j, arm, s);
  add_online_json(j, arm);
  return j;
}

nlohmann::json ab_json(const ArmRecord& replicated, const ArmRecord& sharded) {
  const ArmSummary r = summarize(replicated);
  const ArmSummary s = summarize(sharded);
  nlohmann::json j;
  j["replicated"] = arm_json(replicated);
  j["sharded"] = arm_json(sharded);
  j["vision_time_ratio"] = ratio(s.vision_seconds, r.vision_seconds);
  j["vision_cpu_time_ratio"] =
      ratio(s.vision_cpu_seconds, r.vision_cpu_seconds);
  j["step_time_ratio"] = ratio(s.step_seconds, r.step_seconds);
  j["gather_time_ratio"] = ratio(s.gather_seconds, r.gather_seconds);
  j["peak_bytes_ratio"] = ratio(
      static_cast<double>(s.peak_bytes), static_cast<double>(r.peak_bytes));
  j["vision_peak_bytes_ratio"] = ratio(
      static_cast<double>(s.vision_peak_bytes),
      static_cast<double>(r.vision_peak_bytes));
  j["loss_max_abs_diff"] = loss_max_abs_diff(replicated, sharded);
  return j;
}

}  // namespace cli
}  // namespace frameshard
