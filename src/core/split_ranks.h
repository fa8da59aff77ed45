// File: core/split_ranks.h
//
// !!! Internal header of frameshard::core, not installed. !!!
//
// Builds the ranks of a split plan (frameshard/plan.h RankShard::pieces)
// from a split partition: make_plan calls it when the split helps, then
// fingerprints the plan.
//
// Usage:
//   SplitPartition sp = split_partition(plan.frames, opts, plan.unit_costs);
//   if (sp.split) internal::build_split_ranks(plan, sp);
#pragma once

#include <frameshard/plan.h>
#include <frameshard/split_plan.h>

namespace frameshard {
namespace internal {

/// Fills plan.partition (split-aware costs, cuts = first unit of each rank,
/// assignment = rank of each unit's first row), plan.ranks,
/// plan.gather_counts, plan.split and plan.unsplit_max_cost. plan.frames,
/// plan.options and plan.unit_costs must be set.
void build_split_ranks(ShardPlan& plan, const SplitPartition& split);

}  // namespace internal
}  // namespace frameshard
