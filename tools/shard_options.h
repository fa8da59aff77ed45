// The plan options of the commands that run the sharded path on the ranks
// the user asked for (`verify`, `encode`): the policy forced on, and the
// --partitioner / --min-local-patch-rows options applied.
//
// Usage:
//   PlanOptions o = plan_options(config);  // or PlanOptions{}
//   apply_shard_options(o, a.nproc, a.partitioner, a.min_local_patch_rows);
#pragma once

#include <frameshard/plan.h>

#include <cstdint>
#include <string>

namespace frameshard {
namespace cli {

/// Sets o.world = nproc and forces the sharded path (the user asked for N
/// ranks: no min_tokens / min_frames threshold); a non-empty `partitioner`
/// and a `min_local_patch_rows` >= 0 override o's (-1: keep o's).
void apply_shard_options(
    PlanOptions& o,
    int nproc,
    const std::string& partitioner,
    int64_t min_local_patch_rows);

}  // namespace cli
}  // namespace frameshard
