// File: core/plan_build.h
//
// !!! Internal header of frameshard::core, not installed. !!!
//
// The steps of make_plan (frameshard/plan.h) that a plan with a different
// partition reuses: make_blocked_plan partitions each block of ranks on its
// own, then builds the ranks and the fingerprint as make_plan does.
//
// Usage:
//   internal::check_plan_options(opts);
//   plan.unit_costs = internal::unit_costs(plan.frames, opts.cost);
//   plan.partition = ...;                    // any partition of the units
//   internal::finish_plan(plan, /*dummy_for_empty=*/true);
#pragma once

#include <frameshard/plan.h>
#include <frameshard/split_plan.h>

#include <vector>

namespace frameshard {
namespace internal {

/// make_plan's option checks (frameshard::Error naming the field).
void check_plan_options(const PlanOptions& opts);

/// The cost of every frame unit under `cost`.
std::vector<double> unit_costs(const FrameSet& frames, const CostModel& cost);

/// From plan.frames, plan.options and plan.partition: plan.ranks,
/// gather_counts, restore_rows and the fingerprint of a whole-frame plan.
/// A rank without units encodes a dummy frame when `dummy_for_empty`.
void finish_plan(ShardPlan& plan, bool dummy_for_empty);

/// The same for a split partition (core/split_ranks.h).
void finish_split_plan(ShardPlan& plan, const SplitPartition& split);

}  // namespace internal
}  // namespace frameshard
