// The report of `frameshard plan`: the per-rank table (with the pieces of
// split frames and their K/V exchange), the JSON object and the SVG chart.
// A workload with media_ids (the grpo preset) also reports its distinct and
// total frame units, patch rows and tokens (frameshard/dedup.h); with
// frame_sharding.dedup the plan covers the distinct units only. A workload
// without media (plan --manifest on text-only samples) says "no media" in
// the table and "no_media": true in the JSON object.
//
// Usage:
//   PlanReport rep{wl, "preset, seed 0", plan, note, candidates, tower};
//   print_plan(std::cout, rep);
//   std::cout << plan_json(rep).dump(2);
#pragma once

#include <frameshard/cost.h>
#include <frameshard/dedup.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/workload.h>

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// What the comparison table shows for one partitioner.
struct Candidate {
  Partitioner method;
  Partition partition;
  double ratio_to_optimal = 1.0;
};

struct PlanReport {
  const Workload& workload;
  std::string origin;
  const ShardPlan& plan;
  std::string policy_note;
  std::vector<Candidate> candidates;
  /// The config's tower: its width and full-attention layers size the K/V
  /// exchange of split frames in MiB.
  const TowerDims& tower;
  /// The workload's distinct units by its media_ids (units == 0: no ids),
  /// and whether the plan covers them (frame_sharding.dedup).
  FrameDedup dedup = {};
  bool planned_distinct = false;
};

/// No partition (contiguous or not) has a bottleneck below the largest unit
/// or the mean: when a huge image dominates, this is what every frame-level
/// partitioner hits.
double lower_bound_cost(const ShardPlan& plan);

/// K/V exchange of a split plan per step's forward (the backward returns as
/// much): rows summed over ranks and full-attention layers' bf16 K and V.
struct ExchangeVolume {
  int64_t rows = 0;  // K/V rows per full-attention layer, all ranks
  double mib = 0.0;  // rows * 2 (K, V) * hidden * 2 bytes * full layers
};
ExchangeVolume exchange_volume(const ShardPlan& plan, const TowerDims& tower);

void print_plan(std::ostream& os, const PlanReport& rep);
nlohmann::json plan_json(const PlanReport& rep);
std::string plan_svg(const PlanReport& rep);

}  // namespace cli
}  // namespace frameshard
