// frameshard._C.OnlineCost (bind_online.h): the online cost model of one
// wrapped tower, its samples as a plan dict gives them, and the fit in
// force as a dict.
#include "bind_online.h"

#include "bindings.h"

#include <frameshard/calibrate.h>
#include <frameshard/error.h>
#include <frameshard/tower.h>

#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <utility>

namespace frameshard {
namespace python {
namespace {

// A plan dict's list of (a, b, c) triples as T{a, b, c}: its grid rows and
// its pieces (frame, begin, end).
template <typename T>
std::vector<T> triples(const pybind11::handle& list) {
  std::vector<T> out;
  for (const auto& x : list.cast<pybind11::list>()) {
    const auto t = x.cast<std::tuple<int64_t, int64_t, int64_t>>();
    out.push_back(T{std::get<0>(t), std::get<1>(t), std::get<2>(t)});
  }
  return out;
}

}  // namespace

OnlineRun::OnlineRun(PlanOptions base, OnlineCostOptions options)
    : base_(std::move(base)), online_(flop_fit(base_), options) {}

PlanOptions OnlineRun::plan_options(PlanOptions base) const {
  return plan_options_with(online_.in_force(), std::move(base));
}

WorkloadSample OnlineRun::rank_sample(
    const pybind11::dict& rank, bool split) const {
  return call_workload(
      rank["cu_seqlens"].cast<std::vector<int64_t>>(),
      triples<GridThw>(rank["grid"]),
      triples<FramePiece>(rank["pieces"]),
      base_.cost,
      split,
      0.0);
}

std::vector<double> OnlineRun::sample(
    const pybind11::dict& plan, int64_t rank, double seconds) const {
  if (plan["path"].cast<std::string>() == to_string(PlanPath::kReplicated)) {
    // Every rank ran every frame.
    std::vector<int64_t> rows;
    for (const auto& u : plan["units"].cast<pybind11::list>()) {
      rows.push_back(u.cast<pybind11::dict>()["patch_rows"].cast<int64_t>());
    }
    const auto d =
        to_doubles(workload_sample(rows, base_.cost, false, seconds));
    return {d.begin(), d.end()};
  }
  const auto ranks = plan["ranks"].cast<pybind11::list>();
  FRAMESHARD_CHECK(
      rank >= 0 && rank < static_cast<int64_t>(ranks.size()),
      "OnlineCost.sample",
      "expected rank in [0, ",
      ranks.size(),
      "), got ",
      rank);
  WorkloadSample s = rank_sample(
      ranks[rank].cast<pybind11::dict>(), plan["split"].cast<bool>());
  s.seconds = seconds;
  const auto d = to_doubles(s);
  return {d.begin(), d.end()};
}

bool OnlineRun::learn(
    const std::vector<double>& gathered, const std::vector<GridThw>& grid) {
  if (!online_.record_gathered(gathered)) {
    return false;
  }
  return online_.update([&](const WorkloadFit& with, const WorkloadFit& judge) {
    if (grid.empty()) {
      return 0.0;  // no batch every rank shares: no gain to weigh
    }
    return predicted_slowest(
        make_plan(grid, plan_options_with(with, base_)), judge, base_.cost);
  });
}

double OnlineRun::predict_slowest(const pybind11::dict& plan) const {
  const bool split = plan["split"].cast<bool>();
  double slowest = 0.0;
  for (const auto& r : plan["ranks"].cast<pybind11::list>()) {
    slowest = std::max(
        slowest,
        online_.in_force().predict(
            rank_sample(r.cast<pybind11::dict>(), split)));
  }
  return slowest;
}

namespace {

// The floats of one rank's sample (its seconds last), for Python.
const int64_t kSampleSize = static_cast<int64_t>(kWorkloadSampleDoubles);

pybind11::dict fit_dict(const WorkloadFit& f) {
  pybind11::dict d;
  d["fitted"] = f.fitted;
  d["a"] = f.model.a;
  d["b"] = f.model.b;
  d["c"] = f.model.c;
  d["per_call"] = f.per_call;
  d["exchange_fixed"] = f.exchange_fixed;
  d["exchange_row"] = f.exchange_row;
  d["rms_relative_error"] = f.rms_relative_error;
  d["flop_rms_relative_error"] = f.flop_rms_relative_error;
  d["used"] = f.used;
  d["rejected"] = f.rejected;
  d["describe"] = f.describe();
  return d;
}

std::shared_ptr<OnlineRun> make_online(
    const Overrides& overrides,
    int64_t world,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    const pybind11::object& tower_dims,
    int64_t window,
    int64_t warmup_calls) {
  OnlineCostOptions o;
  o.window = window;
  o.warmup_calls = warmup_calls;
  return std::make_shared<OnlineRun>(
      plan_options_from(
          overrides,
          world,
          spatial_merge_size,
          temporal_patch_size,
          tower_dims),
      o);
}

}  // namespace

void init_online(pybind11::module_& m) {
  namespace py = pybind11;
  py::class_<OnlineRun, std::shared_ptr<OnlineRun>>(
      m,
      "OnlineCost",
      R"doc(One tower's online cost model (frameshard/online_cost.h): what
encode and encode_mesh plan with when ShardCall.online is set. Not
thread-safe; every rank makes the same calls in the same order.)doc")
      .def(
          py::init(&make_online),
          py::arg("overrides"),
          py::arg("world"),
          py::arg("spatial_merge_size"),
          py::arg("temporal_patch_size"),
          py::arg("tower_dims"),
          py::arg("window") = 64,
          py::arg("warmup_calls") = 2)
      .def(
          "sample",
          &OnlineRun::sample,
          py::arg("plan"),
          py::arg("rank"),
          py::arg("seconds"),
          R"doc(Rank `rank`'s sample of a plan dict (the frames its tower ran)
with `seconds`: SAMPLE_SIZE floats, what the all-gather shares.)doc")
      .def(
          "learn",
          [](OnlineRun& self,
             const std::vector<double>& gathered,
             const at::Tensor& grid) {
            return self.learn(gathered, grid_from_tensor(grid));
          },
          py::arg("gathered"),
          py::arg("grid_thw"),
          R"doc(Records every rank's samples (SAMPLE_SIZE floats each, seconds last;
seconds 0: the rank
ran no tower) and updates the fit, re-planning grid_thw (the last call's
planned grid). True when the model in force changed.)doc")
      .def(
          "predict_slowest",
          &OnlineRun::predict_slowest,
          py::arg("plan"),
          R"doc(The slowest rank of a plan dict in seconds, as the model in force
predicts it.)doc")
      .def_readonly_static("SAMPLE_SIZE", &kSampleSize)
      .def_property_readonly(
          "in_force",
          [](const OnlineRun& self) {
            return fit_dict(self.online().in_force());
          })
      .def_property_readonly(
          "why", [](const OnlineRun& self) { return self.online().why(); })
      .def_property_readonly(
          "calls", [](const OnlineRun& self) { return self.online().calls(); })
      .def_property_readonly(
          "switches",
          [](const OnlineRun& self) { return self.online().switches(); })
      .def(
          "calibration_text",
          [](const OnlineRun& self, const std::string& comment) {
            FRAMESHARD_CHECK(
                self.online().in_force().fitted,
                "OnlineCost.calibration_text",
                "expected a fit in force (after the warm-up), got ",
                self.online().in_force().describe());
            return calibration_text(self.online().in_force().model, comment);
          },
          py::arg("comment"),
          R"doc(The fit in force as a frameshard calibrate file's text.)doc");
}

}  // namespace python
}  // namespace frameshard
