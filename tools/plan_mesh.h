// `frameshard plan --dp D`: the mesh plan of D replicas' batches over
// D x cp ranks (frame_sharding.mesh_dims [dp, cp], frameshard/mesh_plan.h),
// with policy auto's per-step choice between the pooled plan and the
// CP-only one: which it takes, the two predictions and why.
//
// Usage:
//   auto replicas = mesh_replicas(args...);   // one grid per replica
//   MeshPlan mp = make_mesh_plan(replicas, mesh_plan_options(config, D, l));
//   print_mesh_plan(std::cout, mp, replicas, origins);
#pragma once

#include <frameshard/config.h>
#include <frameshard/mesh_plan.h>

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// The mesh options of `config` (its cp_size, plan options with `layout`,
/// mesh_min_gain) for `dp` replicas.
MeshPlanOptions mesh_plan_options(
    const Config& config, int64_t dp, const MediaLayout& layout);

/// The text report: the replicas' batches, the mode and its reason, the
/// predictions, and one row per mesh rank (its replica and the replicas
/// whose frames it encodes).
void print_mesh_plan(
    std::ostream& os,
    const MeshPlan& mp,
    const std::vector<std::string>& origins);

/// plan --dp --json: {"dp", "cp", "mode", "weighed", "gain", "reason",
/// "mesh_seconds", "cp_only_seconds", "route_bytes": {mesh, cp_only},
/// "path", "split", "replica_units", "replica_tokens", "origins", "ranks":
/// [{rank, replica, units, patch_rows, tokens, cost, from_replicas}]}.
nlohmann::json mesh_plan_json(
    const MeshPlan& mp, const std::vector<std::string>& origins);

}  // namespace cli
}  // namespace frameshard
