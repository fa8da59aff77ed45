// cost_alpha: online in the trainer: one rank's sample, the all-gather of
// every rank's, and the model's update (online_step.h).
#include "train/online_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <utility>

namespace frameshard {
namespace train {
namespace detail {

namespace {

// Every rank's doubles in rank order (one all-gather; CPU doubles, which
// Gloo and an NCCL group's Gloo backend move alike, no device sync).
std::vector<double> gather_doubles(
    const std::array<double, kWorkloadSampleDoubles>& mine,
    const ProcessGroupPtr& world) {
  const int64_t size = world ? world->getSize() : 1;
  if (size == 1) {
    return {mine.begin(), mine.end()};
  }
  const at::Tensor local = at::tensor(
      std::vector<double>(mine.begin(), mine.end()),
      at::TensorOptions().dtype(at::kDouble));
  std::vector<std::vector<at::Tensor>> out(1);
  for (int64_t q = 0; q < size; ++q) {
    out[0].push_back(at::empty_like(local));
  }
  std::vector<at::Tensor> in{local};
  world->allgather(out, in)->wait();
  std::vector<double> all;
  all.reserve(static_cast<size_t>(size) * kWorkloadSampleDoubles);
  for (const at::Tensor& t : out[0]) {
    const double* v = t.data_ptr<double>();
    all.insert(all.end(), v, v + kWorkloadSampleDoubles);
  }
  return all;
}

}  // namespace

WorkloadSample tower_sample(
    const std::vector<int64_t>& unit_rows,
    const ShardPlan& plan,
    const CostModel& flops,
    double seconds) {
  if (unit_rows.empty() || !(seconds > 0.0)) {
    return WorkloadSample{};  // no tower this step: record_gathered skips it
  }
  // A split plan: every rank of the group joins the K/V exchanges.
  return workload_sample(
      unit_rows, flops, plan.sharded() && plan.split, seconds);
}

OnlineStep::OnlineStep(const PlanOptions& flop_plan)
    : flops_(flop_plan.cost),
      online_(flop_fit(flop_plan.cost, flop_plan.split.exchange_fixed_cost)) {}

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
  const std::vector<double> all = gather_doubles(
      to_doubles(tower_sample(vision.tower_unit_rows(), plan, flops_, seconds)),
      world);
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
