// frameshard._C.OnlineCost: one tower's online cost model (frameshard/
// online_cost.h) with the plan options it re-plans with. The Python layer
// (frameshard/_online.py) times the tower, shares the samples and records
// them; encode and encode_mesh plan with the fit in force (ShardCall.online).
#pragma once

#include <frameshard/online_cost.h>
#include <frameshard/plan.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace python {

class OnlineRun {
 public:
  /// `base`: the call's plan options (its cost the FLOP model that
  /// cost_alpha online starts from).
  OnlineRun(PlanOptions base, OnlineCostOptions options);

  /// `base` planning with the fit in force.
  PlanOptions plan_options(PlanOptions base) const;
  /// This rank's sample of a plan dict's rank (cu_seqlens) as 7 doubles.
  std::vector<double> sample(
      const pybind11::dict& plan, int64_t rank, double seconds) const;
  /// record_gathered, then update() re-planning `grid` (the last call's
  /// planned grid); true on a switch. False, nothing recorded, when no
  /// rank ran the tower.
  bool learn(
      const std::vector<double>& gathered, const std::vector<GridThw>& grid);
  /// The slowest rank of a plan dict as the fit in force predicts it.
  double predict_slowest(const pybind11::dict& plan) const;
  const OnlineCost& online() const {
    return online_;
  }

 private:
  WorkloadSample rank_sample(const pybind11::dict& rank, bool split) const;

  PlanOptions base_;
  OnlineCost online_;
};

}  // namespace python
}  // namespace frameshard
