// File: core/mesh_choice.h
//
// !!! Internal header of frameshard::core, not installed. !!!
//
// The per-step choice between the mesh plan and the CP-only plan
// (frameshard/mesh_plan.h, "The per-step choice"): make_mesh_plan calls it
// on the plan it pooled.
//
// Usage:
//   internal::choose_mesh_mode(mp, options, planned_grid);
#pragma once

#include <frameshard/mesh_plan.h>

#include <vector>

namespace frameshard {
namespace internal {

/// With policy auto, a sharded plan and dp > 1: weighs mp.plan against the
/// CP-only plan of `planned` (the grid mp.plan covers: the pooled grid, or
/// the mesh's distinct grid with dedup) and keeps the cheaper one, setting
/// mp.mode and mp.choice. Otherwise leaves mp as it is.
void choose_mesh_mode(
    MeshPlan& mp,
    const MeshPlanOptions& options,
    const std::vector<GridThw>& planned);

/// make_mesh_plan's checks of min_gain and pixel_row_bytes.
void check_mesh_choice_options(const MeshPlanOptions& options);

}  // namespace internal
}  // namespace frameshard
