// File: tests/testing/plan_options.h
//
// Plan options that always shard (policy on, zero thresholds, no floor
// frames), for torch-free tests of the plan, its routes and the mesh that
// want the sharded path for any non-empty grid.
//
// Usage:
//   const ShardPlan plan = make_plan({{2, 4, 4}}, testing::always_shard(2));
//   const MeshPlan mp = make_mesh_plan(replicas, testing::always_shard_mesh(2,
//   2));
#pragma once

#include <frameshard/mesh_plan.h>
#include <frameshard/plan.h>

#include <cstdint>

namespace frameshard {
namespace testing {

inline PlanOptions always_shard(int64_t world) {
  PlanOptions o;
  o.world = world;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  o.min_local_patch_rows = 0;
  return o;
}

/// dp x cp mesh whose pooled plan always shards; split turns frame
/// splitting on.
inline MeshPlanOptions always_shard_mesh(
    int64_t dp, int64_t cp, bool split = false) {
  MeshPlanOptions o;
  o.dp = dp;
  o.cp = cp;
  o.plan = always_shard(1);
  o.plan.split.enabled = split;
  return o;
}

}  // namespace testing
}  // namespace frameshard
