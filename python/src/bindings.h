// !!! Internal header of the frameshard._C extension (python/src/), not
// installed. !!!
//
// What the binding units share: the config from the Python layer's dotted
// overrides, the plan as a dict, and one init_* per area that
// PYBIND11_MODULE (bindings.cpp) calls.
#pragma once

#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/frames.h>
#include <frameshard/plan.h>

#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace frameshard {
namespace python {

namespace py = pybind11;

/// (dotted key, YAML value) pairs: FrameShardingConfig.overrides().
using Overrides = std::vector<std::pair<std::string, std::string>>;

/// A Config from dotted overrides (key, YAML value): every value goes through
/// apply_override, so a bad field raises the message a YAML file would.
Config config_from(const Overrides& overrides, int64_t cp_size);

/// The plan options of the overrides; `tower_dims` (None or the fields of
/// frameshard.TowerDims): the running tower that cost_alpha auto counts.
PlanOptions plan_options_from(
    const Overrides& overrides,
    int64_t cp_size,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    const py::object& tower_dims);

py::list grid_list(const std::vector<GridThw>& grid);
py::dict plan_dict(const ShardPlan& plan);

// bind_config.cpp: build_info, config, config_fields, calibration fits.
void init_build_info(py::module_& m);
void init_config(py::module_& m);
void init_calibrate(py::module_& m);
// bind_plan.cpp: plan, cost_model, workload, visual_token_owners,
// chunk_positions, padded_length.
void init_plan(py::module_& m);
// bind_runtime.cpp: all_gather_rows, agree, encode, encode_mesh
// (collectives).
void init_runtime(py::module_& m);
// bind_online.cpp: OnlineCost (cost_alpha online).
void init_online(py::module_& m);
// bind_report.cpp: ab_plot_svg (the A/B plot).
void init_report(py::module_& m);

}  // namespace python
}  // namespace frameshard
