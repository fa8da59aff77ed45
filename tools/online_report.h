// What `frameshard train` and `frameshard ab` report for cost_alpha online
// (frameshard/online_cost.h, src/train/online_step.h): each step the
// predicted against the measured slowest tower and, on a switch, the model
// put in force and why; at the end the model in force, in the summary, the
// --json object and, with --write-cost FILE, a calibration file
// (frameshard/calibrate.h) that a next run reads as cost_alpha: FILE.
// Nothing of it without online. Defined in tools/online_report.cpp.
#pragma once

#include "train_report.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace frameshard {
namespace cli {

/// "  tower 0.0123 s predicted, 0.0150 s measured" (slowest rank), and on
/// a switch a second line "  cost model -> online: a=... (switched: ...)";
/// "" for a step without online.
std::string online_step_text(const train::StepMetrics& m);

/// "  cost model       online: a=... (2 switches over 30 calls)" and the
/// last update's decision; nothing for an arm without online.
void print_online_summary(std::ostream& os, const ArmRecord& arm);

/// Per step cost_model, predicted_slowest_seconds,
/// measured_slowest_seconds and cost_switched; with online also
/// cost_model_final (describe()), cost_fitted, cost_calls, cost_switches
/// and cost_update (the last why()).
void add_online_json(nlohmann::json& j, const ArmRecord& arm);

/// Writes the fit in force at the end of `arm` to `path` as a calibration
/// file. Throws frameshard::Error when the arm has no online model or no
/// fit is in force yet (the FLOP model's units are no seconds), or when
/// the file cannot be written.
void write_cost_file(const std::string& path, const ArmRecord& arm);

}  // namespace cli
}  // namespace frameshard
