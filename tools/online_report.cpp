// cost_alpha online in the reports of `train` and `ab` (online_report.h).
#include "online_report.h"

#include <frameshard/calibrate.h>
#include <frameshard/error.h>

#include <cstdio>
#include <fstream>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

std::string seconds_text(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.4g s", v);
  return buf;
}

std::string switches_text(int64_t n) {
  return std::to_string(n) + (n == 1 ? " switch" : " switches");
}

// Only online fills cost_update (trainer.h).
bool has_online(const train::StepMetrics& m) {
  return !m.cost_update.empty();
}

}  // namespace

std::string online_step_text(const train::StepMetrics& m) {
  if (!has_online(m)) {
    return "";
  }
  std::string t = "  tower " + seconds_text(m.predicted_slowest_seconds) +
                  " predicted, " + seconds_text(m.measured_slowest_seconds) +
                  " measured";
  if (m.cost_switched) {
    t += "\n  cost model -> " + m.cost_model_next + " (" + m.cost_update + ")";
  }
  return t;
}

void print_online_summary(std::ostream& os, const ArmRecord& arm) {
  if (!arm.online) {
    return;
  }
  const OnlineCost& o = *arm.online;
  os << "  cost model       " << o.in_force().describe() << " ("
     << switches_text(o.switches()) << " over " << o.calls() << " calls)\n";
  os << "  last update      " << o.why() << "\n";
}

void add_online_json(nlohmann::json& j, const ArmRecord& arm) {
  std::vector<std::string> models;
  std::vector<double> predicted, measured;
  std::vector<bool> switched;
  for (const auto& ranks : arm.steps) {
    const train::StepMetrics& m = ranks.front();  // the same on every rank
    models.push_back(m.cost_model);
    predicted.push_back(m.predicted_slowest_seconds);
    measured.push_back(m.measured_slowest_seconds);
    switched.push_back(m.cost_switched);
  }
  j["cost_model"] = models;
  j["predicted_slowest_seconds"] = predicted;
  j["measured_slowest_seconds"] = measured;
  j["cost_switched"] = switched;
  if (arm.online) {
    const OnlineCost& o = *arm.online;
    j["cost_model_final"] = o.in_force().describe();
    j["cost_fitted"] = o.in_force().fitted;
    j["cost_calls"] = o.calls();
    j["cost_switches"] = o.switches();
    j["cost_update"] = o.why();
  }
}

void write_cost_file(const std::string& path, const ArmRecord& arm) {
  FRAMESHARD_CHECK(
      arm.online.has_value(),
      "write_cost_file",
      "expected an arm with cost_alpha online for --write-cost, got ",
      arm.name,
      " without");
  const OnlineCost& o = *arm.online;
  const WorkloadFit& fit = o.in_force();
  // The FLOP model's coefficients are FLOP units, not the seconds a
  // calibration file holds.
  FRAMESHARD_CHECK(
      fit.fitted,
      "write_cost_file",
      "expected a fit in force after ",
      o.calls(),
      " calls to write --write-cost ",
      path,
      ", got the FLOP model (",
      o.why(),
      "); run more steps");
  const std::string comment =
      "frameshard " + arm.name +
      ", cost_alpha online: the fit in force after " +
      std::to_string(o.calls()) + " calls (" + switches_text(o.switches()) +
      ")\n" + fit.describe() +
      "\nper_call and split are left out: per_call is paid once by every "
      "rank (it moves no frame), the split latency comes from "
      "split_exchange_latency_us";
  std::ofstream f(path);
  f << calibration_text(fit.model, comment);
  f.close();
  FRAMESHARD_CHECK(
      f.good(), "write_cost_file", "expected to write --write-cost ", path);
}

}  // namespace cli
}  // namespace frameshard
