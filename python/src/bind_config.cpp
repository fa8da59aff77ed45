// frameshard._C: build facts, the config and calibration fits (bindings.h).
#include "bindings.h"

#include <frameshard/build_info.h>
#include <frameshard/calibrate.h>
#include <frameshard/config.h>

#include <string>
#include <tuple>
#include <vector>

namespace frameshard {
namespace python {

Config config_from(const Overrides& overrides, int64_t cp_size) {
  Config cfg;
  apply_override(cfg, "distributed.cp_size", std::to_string(cp_size));
  for (const auto& [key, value] : overrides) {
    apply_override(cfg, key, value);
  }
  return cfg;
}

namespace {

py::dict fields_dict(const FrameShardingConfig& fs) {
  py::dict d;
  d["enabled"] = fs.enabled;
  d["mesh_dims"] = fs.mesh_dims;
  d["min_tokens"] = fs.min_tokens;
  d["min_frames"] = fs.min_frames;
  d["min_local_patch_rows"] = fs.min_local_patch_rows;
  d["cost_alpha"] = fs.cost_alpha;
  d["partitioner"] = fs.partitioner;
  d["gather"] = fs.gather;
  d["split_frames"] = fs.split_frames;
  d["split_exchange_cost"] = fs.split_exchange_cost;
  d["split_min_gain"] = fs.split_min_gain;
  d["split_exchange_latency_us"] = fs.split_exchange_latency_us;
  d["tower"] = fs.tower;
  d["policy"] = fs.policy;
  d["gather_bandwidth_gbps"] = fs.gather_bandwidth_gbps;
  return d;
}

/// frameshard.TowerDims.as_dict() as a TowerDims (the fields of cost.h).
TowerDims tower_dims_from(const py::dict& d) {
  TowerDims t;
  t.name = d["name"].cast<std::string>();
  t.depth = d["depth"].cast<int64_t>();
  t.hidden = d["hidden"].cast<int64_t>();
  t.intermediate = d["intermediate"].cast<int64_t>();
  t.gated_mlp = d["gated_mlp"].cast<bool>();
  t.window_patches = d["window_patches"].cast<int64_t>();
  t.full_attention_layers =
      d["full_attention_layers"].cast<std::vector<int64_t>>();
  t.mergers = d["mergers"].cast<int64_t>();
  t.merge_size = d["merge_size"].cast<int64_t>();
  t.out_hidden = d["out_hidden"].cast<int64_t>();
  t.merger_hidden = d["merger_hidden"].cast<int64_t>();
  t.prefix_tokens = d["prefix_tokens"].cast<int64_t>();
  return t;
}

}  // namespace

PlanOptions plan_options_from(
    const Overrides& overrides,
    int64_t cp_size,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    const py::object& tower_dims) {
  const Config cfg = config_from(overrides, cp_size);
  PlanOptions o =
      tower_dims.is_none()
          ? plan_options(cfg)
          : plan_options(cfg, tower_dims_from(tower_dims.cast<py::dict>()));
  o.layout.spatial_merge_size = spatial_merge_size;
  o.layout.temporal_patch_size = temporal_patch_size;
  return o;
}

void init_build_info(py::module_& m) {
  m.def(
      "build_info",
      [] {
        const BuildInfo& b = build_info();
        py::dict d;
        d["version"] = b.version;
        d["git_revision"] = b.git_revision;
        d["torch"] = b.torch_version;
        d["cuda"] = b.cuda;
        d["nccl"] = b.nccl;
        d["gloo_groups"] = b.gloo_groups;
        d["build_type"] = b.build_type;
        d["compiler"] = b.compiler;
        d["text"] = describe(b);
        return d;
      },
      R"doc(This build's facts (frameshard/build_info.h), as a dict.)doc");
}

void init_calibrate(py::module_& m) {
  m.def(
      "fit_quadratic",
      [](const std::vector<std::tuple<int64_t, double, int64_t>>& samples) {
        std::vector<TimingSample> s;
        for (const auto& [rows, seconds, frames] : samples) {
          s.push_back({rows, seconds, frames});
        }
        const QuadraticFit fit = fit_quadratic(s);
        py::dict d;
        d["a"] = fit.model.a;
        d["b"] = fit.model.b;
        d["c"] = fit.model.c;
        d["per_call"] = fit.per_call;
        d["relative_errors"] = fit.relative_errors;
        d["max_relative_error"] = fit.max_relative_error;
        d["rms_relative_error"] = fit.rms_relative_error;
        return d;
      },
      py::arg("samples"),
      R"doc(frameshard::fit_quadratic over (patch_rows, seconds, frames)
samples: a, b, c, per_call and the relative errors.)doc");
  m.def(
      "calibration_text",
      [](double a, double b, double c, const std::string& comment) {
        return calibration_text(CostModel::quadratic(a, b, c), comment);
      },
      py::arg("a"),
      py::arg("b"),
      py::arg("c"),
      py::arg("comment"),
      R"doc(The calibration file's text (frameshard/calibrate.h).)doc");
}

void init_config(py::module_& m) {
  m.def(
      "make_config",
      [](const Overrides& overrides, int64_t cp_size) {
        return fields_dict(config_from(overrides, cp_size).frame_sharding);
      },
      py::arg("overrides"),
      py::arg("cp_size"),
      R"doc(Validated frame-sharding fields from dotted (key, YAML value)
overrides applied to the defaults, plus distributed.cp_size.)doc");
  m.def(
      "parse_config",
      [](const std::string& yaml, const std::string& source) {
        const Config cfg = parse_config(yaml, source);
        return py::make_tuple(cfg.cp_size, fields_dict(cfg.frame_sharding));
      },
      py::arg("yaml"),
      py::arg("source") = "",
      R"doc((cp_size, frame-sharding fields) of a YAML text.)doc");
  m.def(
      "to_yaml",
      [](const Overrides& overrides, int64_t cp_size) {
        return to_yaml(config_from(overrides, cp_size));
      },
      py::arg("overrides"),
      py::arg("cp_size"),
      R"doc(The YAML text of the config the overrides describe.)doc");
  m.def(
      "config_fields",
      [] { return frame_sharding_keys(); },
      R"doc(The keys of distributed.multimodal.vision.frame_sharding the C++
config schema knows, in declaration order.)doc");
}

}  // namespace python
}  // namespace frameshard
