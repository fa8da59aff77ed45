// cost_alpha: online in the trainer: one rank's sample, the all-gather of
// every rank's, and the model's update (online_step.h).
#include "train/online_step.h"

#include "train/gather_doubles.h"

#include <algorithm>
#include <string>
#include <utility>

namespace frameshard {
namespace train {
namespace detail {

WorkloadSample tower_sample(
    const VisionStage& vision,
    const ShardPlan& plan,
    const CostModel& flops,
    double seconds) {
  if (!(seconds > 0.0)) {
    return WorkloadSample{};  // no tower this step: record_gathered skips it
  }
  // A split plan: every rank of the group joins the K/V exchanges.
  WorkloadSample s =
      vision.tower_workload(flops, plan.sharded() && plan.split, seconds);
  return s.calls > 0.0 ? s : WorkloadSample{};
}

OnlineStep::OnlineStep(const PlanOptions& flop_plan)
    : flops_(flop_plan.cost), online_(flop_fit(flop_plan)) {}

PlanOptions OnlineStep::plan_options(const PlanOptions& base) const {
  return plan_options_with(online_.in_force(), base);
}

void OnlineStep::finish_step(
    const VisionStage& vision,
    double seconds,
    const ProcessGroupPtr& world,
    bool mesh,
    StepMetrics& m) {
  const ShardPlan& plan = vision.plan();
  const auto mine = to_doubles(tower_sample(vision, plan, flops_, seconds));
  const std::vector<double> all =
      all_gather_doubles({mine.begin(), mine.end()}, world);
  // The fit in force planned this step: its prediction of the ranks that
  // ran, against their measured seconds (the same samples).
  for (size_t i = 0; i < all.size(); i += kWorkloadSampleDoubles) {
    const WorkloadSample s = from_doubles(all.data() + i);
    if (s.seconds > 0.0) {
      m.predicted_slowest_seconds =
          std::max(m.predicted_slowest_seconds, online_.in_force().predict(s));
      m.measured_slowest_seconds =
          std::max(m.measured_slowest_seconds, s.seconds);
    }
  }
  if (mesh && plan.options.world != (world ? world->getSize() : 1)) {
    // A mesh step that ran each replica's CP plan: the replicas planned
    // different batches, and a judgement on this one would let their
    // models -- which plan the next mesh step together -- part. Only the
    // fit's error can then switch it.
    last_grid_.clear();
  } else if (!plan.frames.grid.empty()) {
    last_grid_ = plan.frames.grid;
    last_options_ = plan.options;
  }
  if (online_.record_gathered(all)) {
    m.cost_switched = online_.update(
        [this](const WorkloadFit& plan_with, const WorkloadFit& judge) {
          if (last_grid_.empty()) {
            return 0.0;  // no batch with frames yet: no gain to weigh
          }
          return predicted_slowest(
              make_plan(
                  last_grid_, plan_options_with(plan_with, last_options_)),
              judge,
              flops_);
        });
    m.cost_update = online_.why();
  } else {
    m.cost_update = "nothing recorded: no rank ran the tower";
  }
  m.cost_model_next = online_.in_force().describe();
}

}  // namespace detail
}  // namespace train
}  // namespace frameshard
