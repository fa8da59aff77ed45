// !!! Internal header of frameshard::train, not installed. !!!
//
// cost_alpha: online in the trainer (frameshard/online_cost.h). The state
// starts from the FLOP model the arm's plan options already hold, and each
// step of the sharded arm:
//   1. plans with the fit in force (plan_options);
//   2. after the tower's backward (finish_step), describes this rank's
//      tower work -- the cu_seqlens segments it really ran: its plan rank's
//      frames and pieces on a sharded step (ShardPlan::ranks[r] of the CP
//      rank, or of the world rank over the dp x cp mesh), every frame of
//      its batch on a replicated one, nothing on a rank that ran no tower
//      -- with its tower seconds (thread CPU time on a CPU, device-synced
//      wall time on CUDA) as 7 doubles, and all-gathers them over the
//      world (ONE all-gather of world x 7 doubles, CPU: Gloo, or the Gloo
//      backend of an NCCL group);
//   3. records every rank's sample that ran the tower and updates the
//      model, judging a switch on the latest batch's grid re-planned with
//      the options that ran.
// Every rank records the same doubles in the same order; the judge's grid
// is the plan's, the same on every rank of the group that planned it (the
// CP group; the world over the mesh). So within each CP group (the whole
// world over the mesh, and at dp 1) every rank's OnlineCost is bitwise
// the same and their plans agree; with mesh_dims [cp] and dp > 1 the
// replicas may differ in when a fit replaces a fit (their batches differ),
// which is harmless: each replica plans alone.
// Defined in src/train/online_step.cpp.
#pragma once

#include <frameshard/online_cost.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/train/trainer.h>

#include "train/vision_stage.h"

#include <vector>

namespace frameshard {
namespace train {
namespace detail {

class OnlineStep {
 public:
  /// `flop_plan`: the arm's plan options with the FLOP model (cost_alpha
  /// online parses as it) and its split latency in that model's units.
  explicit OnlineStep(const PlanOptions& flop_plan);

  /// `base` planning with the fit in force.
  PlanOptions plan_options(const PlanOptions& base) const;

  /// Steps 2 and 3 of the banner for the step `vision` just ran, taking
  /// `seconds` as this rank's tower time; fills m's online fields.
  /// Collective over `world` (every rank, every step).
  /// `mesh`: the step ran over the dp x cp mesh, whose next plan every
  /// rank of the world makes together.
  void finish_step(
      const VisionStage& vision,
      double seconds,
      const ProcessGroupPtr& world,
      bool mesh,
      StepMetrics& m);

  const OnlineCost& cost() const {
    return online_;
  }

 private:
  CostModel flops_;  // the features' FLOP model (WorkloadSample::flop_cost)
  OnlineCost online_;
  // The latest batch with frames, as its plan held them, and the options
  // that planned it: what update() re-plans to weigh a switch.
  std::vector<GridThw> last_grid_;
  PlanOptions last_options_;
};

/// This rank's sample: the tower call of this step (VisionStage::
/// tower_workload: its segments, grid and pieces), split when the plan cut
/// frames, 0 seconds (skipped by record_gathered) when the tower did not
/// run. On a sharded step equal to rank_workload(plan, rank) of the rank's
/// index in the plan.
WorkloadSample tower_sample(
    const VisionStage& vision,
    const ShardPlan& plan,
    const CostModel& flops,
    double seconds);

}  // namespace detail
}  // namespace train
}  // namespace frameshard
