// File: python/src/bindings.cpp
//
// frameshard._C: the only unit that includes pybind11. It exposes the C++
// library to the pure-Python layer (python/frameshard/*.py), which adds the
// type hints, the dataclasses and the docstrings users see:
//
//   _C.make_config(overrides, cp_size)       validated config fields (dict)
//   _C.parse_config(yaml_text, source)       (cp_size, fields) of a YAML text
//   _C.plan(grid_thw, overrides, cp_size, merge, temporal)   plan as a dict
//   _C.all_gather_rows(local, counts, group, timeout_ms)     collective
//   _C.encode(tower, pixel_values, grid_thw, group, ...)     collective
//
// Tensors and torch.distributed ProcessGroups cross with torch's own pybind11
// type casters (torch/csrc/utils/pybind.h): the extension is compiled with
// torch's bundled pybind11 so both share one pybind11 internals record, and
// `import torch` must come first (frameshard/__init__.py does it).
//
// GIL: released during every collective. encode calls the Python tower back
// from C++, so the tower callback re-acquires it; the gather's backward runs
// inside torch's autograd engine, which releases the GIL itself.
//
// Errors: frameshard::Error and c10::Error leave as frameshard.FrameshardError
// (a ValueError and a RuntimeError) with the C++ message (c10's backtrace
// stripped); an exception raised by the Python tower keeps its text inside
// the message every rank raises.
#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/owner_route.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/tower.h>

#include "tower/check.h"

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace frameshard {
namespace python {
namespace {

using Overrides = std::vector<std::pair<std::string, std::string>>;

/// frameshard.FrameshardError, created at import (module attribute).
PyObject* g_error_type = nullptr;

void translate_errors(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyErr_SetString(g_error_type, e.what());
  } catch (const c10::Error& e) {
    PyErr_SetString(g_error_type, e.what_without_backtrace());
  }
}

// ---------------------------------------------------------------- config

/// A Config from dotted overrides (key, YAML value): every value goes through
/// apply_override, so a bad field raises the message a YAML file would.
Config config_from(const Overrides& overrides, int64_t cp_size) {
  Config cfg;
  apply_override(cfg, "distributed.cp_size", std::to_string(cp_size));
  for (const auto& [key, value] : overrides) {
    apply_override(cfg, key, value);
  }
  return cfg;
}

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
  d["tower"] = fs.tower;
  d["policy"] = fs.policy;
  d["gather_bandwidth_gbps"] = fs.gather_bandwidth_gbps;
  return d;
}

PlanOptions plan_options_from(
    const Overrides& overrides,
    int64_t cp_size,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size) {
  PlanOptions o = plan_options(config_from(overrides, cp_size));
  o.layout.spatial_merge_size = spatial_merge_size;
  o.layout.temporal_patch_size = temporal_patch_size;
  return o;
}

// ------------------------------------------------------------------ plan

py::list grid_list(const std::vector<GridThw>& grid) {
  py::list out;
  for (const auto& g : grid) {
    out.append(py::make_tuple(g.t, g.h, g.w));
  }
  return out;
}

py::dict rank_dict(const RankShard& r) {
  py::dict d;
  d["rank"] = r.rank;
  d["units"] = r.units;
  d["grid"] = grid_list(r.grid);
  py::list ranges;
  for (const auto& range : r.pixel_ranges) {
    ranges.append(py::make_tuple(range.begin, range.end));
  }
  d["pixel_ranges"] = ranges;
  d["cu_seqlens"] = r.cu_seqlens;
  d["real_patch_rows"] = r.real_patch_rows;
  d["real_tokens"] = r.real_tokens;
  d["pad_frames"] = r.pad_frames;
  d["dummy_frames"] = r.dummy_frames;
  d["local_patch_rows"] = r.local_patch_rows;
  d["local_tokens"] = r.local_tokens;
  d["cost"] = r.cost;
  py::list pieces;
  for (const FramePiece& p : r.pieces) {
    pieces.append(py::make_tuple(p.frame, p.begin, p.end));
  }
  d["pieces"] = pieces;
  d["exchange_rows"] = r.exchange_rows;
  return d;
}

py::dict plan_dict(const ShardPlan& plan) {
  py::dict d;
  d["path"] = to_string(plan.path);
  d["reason"] = plan.reason;
  d["world"] = plan.options.world;
  d["partitioner"] = to_string(plan.partition.method);
  d["cost_model"] = plan.options.cost.label;
  d["grid"] = grid_list(plan.frames.grid);
  py::list units;
  for (const auto& u : plan.frames.units) {
    py::dict ud;
    ud["media"] = u.media;
    ud["frame"] = u.frame;
    ud["h"] = u.h;
    ud["w"] = u.w;
    ud["patch_rows"] = u.patch_rows;
    ud["tokens"] = u.tokens;
    ud["pixel_offset"] = u.pixel_offset;
    ud["token_offset"] = u.token_offset;
    units.append(ud);
  }
  d["units"] = units;
  d["unit_costs"] = plan.unit_costs;
  d["cuts"] = plan.partition.cuts;
  d["assignment"] = plan.partition.assignment;
  d["rank_costs"] = plan.partition.rank_costs;
  py::list ranks;
  for (const auto& r : plan.ranks) {
    ranks.append(rank_dict(r));
  }
  d["ranks"] = ranks;
  d["gather_counts"] = plan.gather_counts;
  d["restore_rows"] = plan.restore_rows;
  d["total_patch_rows"] = plan.frames.total_patch_rows;
  d["total_tokens"] = plan.frames.total_tokens;
  d["split"] = plan.split;
  d["unsplit_max_cost"] = plan.unsplit_max_cost;
  d["fingerprint"] = fingerprint_hex(plan.fingerprint);
  return d;
}

py::dict plan_binding(
    const at::Tensor& grid_thw,
    const Overrides& overrides,
    int64_t cp_size,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size) {
  const PlanOptions o = plan_options_from(
      overrides, cp_size, spatial_merge_size, temporal_patch_size);
  return plan_dict(make_plan(grid_from_tensor(grid_thw), o));
}

// ------------------------------------------------------------ collectives

std::chrono::milliseconds millis(int64_t ms) {
  return std::chrono::milliseconds(ms);
}

at::Tensor gather_binding(
    const at::Tensor& local,
    const std::vector<int64_t>& counts,
    const ProcessGroupPtr& group,
    int64_t timeout_ms) {
  GatherOptions o;
  o.timeout = millis(timeout_ms);
  py::gil_scoped_release no_gil;
  return all_gather_rows(local, counts, group, o);
}

/// The Python callable as a VisionTower: called with the GIL held; it must
/// return a list of tensors (the Python layer normalises what the user's
/// tower returns). A Python exception becomes a std::runtime_error with its
/// text while the GIL is still held (the error object needs it to die).
/// Captures a pointer, not a copy: copying a py::object touches its
/// reference count, which needs the GIL, and encode runs without it.
VisionTower python_tower(const py::object& tower) {
  const py::object* fn = &tower;  // outlives the encode call
  return [fn](const TowerInput& in) {
    py::gil_scoped_acquire gil;
    try {
      py::object out = (*fn)(in.pixel_values, in.grid_thw, in.cu_seqlens);
      return out.cast<std::vector<at::Tensor>>();
    } catch (py::error_already_set& e) {
      // "KeyError: 'boom'", without the Python traceback e.what() appends.
      throw std::runtime_error(
          py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
          py::str(e.value()).cast<std::string>());
    } catch (const py::cast_error& e) {
      throw std::runtime_error(
          std::string("expected the tower to return tensors, got "
                      "something else (") +
          e.what() + ")");
    }
  };
}

py::tuple encode_binding(
    const py::object& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const Overrides& overrides,
    int64_t cp_size,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    bool tower_trainable,
    int64_t timeout_ms,
    const std::vector<int64_t>& token_owner) {
  EncodeOptions o;
  o.token_owner = token_owner;
  o.plan = plan_options_from(
      overrides, cp_size, spatial_merge_size, temporal_patch_size);
  o.tower_trainable = tower_trainable;
  o.timeout = millis(timeout_ms);
  // A Python tower is called with (pixel_values, grid_thw, cu_seqlens): it
  // would encode a piece of a split frame as if it were a whole frame.
  FRAMESHARD_CHECK(
      !o.plan.split.enabled,
      "shard_vision",
      "split_frames: expected false for a Python tower (it is not given the "
      "pieces of split frames nor their K/V exchange), got true");
  const VisionTower cpp_tower = python_tower(tower);
  EncodeResult res;
  {
    py::gil_scoped_release no_gil;
    res = encode(cpp_tower, pixel_values, grid_thw, group, o);
  }
  return py::make_tuple(
      res.outputs, plan_dict(res.plan), res.bytes_sent, res.tokens);
}

// ---------------------------------------------------------------- module

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
}

void init_runtime(py::module_& m) {
  m.def(
      "plan",
      &plan_binding,
      py::arg("grid_thw"),
      py::arg("overrides"),
      py::arg("cp_size"),
      py::arg("spatial_merge_size"),
      py::arg("temporal_patch_size"),
      R"doc(The shard plan of an int64 [n, 3] grid_thw, as a dict.)doc");
  m.def(
      "all_gather_rows",
      &gather_binding,
      py::arg("local"),
      py::arg("counts"),
      py::arg("group"),
      py::arg("timeout_ms") = 0,
      R"doc(Differentiable variable-size all-gather along dim 0.
Collective; the GIL is released while it runs.)doc");
  m.def(
      "encode",
      &encode_binding,
      py::arg("tower"),
      py::arg("pixel_values"),
      py::arg("grid_thw"),
      py::arg("group"),
      py::arg("overrides"),
      py::arg("cp_size"),
      py::arg("spatial_merge_size"),
      py::arg("temporal_patch_size"),
      py::arg("tower_trainable"),
      py::arg("timeout_ms") = 0,
      py::arg("token_owner") = std::vector<int64_t>{},
      R"doc(frameshard::encode with a Python tower: returns
(outputs, plan dict, bytes sent, owned token indices). With token_owner
(one CP rank per visual token) each rank gets only its rows. Collective.)doc");
  m.def(
      "visual_token_owners",
      [](const std::vector<int64_t>& positions,
         int64_t seq_len,
         int64_t cp,
         const std::string& split) {
        return visual_token_owners(
            positions, seq_len, cp, parse_sequence_split(split, "split"));
      },
      py::arg("media_positions"),
      py::arg("seq_len"),
      py::arg("cp_size"),
      py::arg("split"),
      R"doc(The CP rank owning each visual token (frameshard/owner_route.h).)doc");
}

}  // namespace
}  // namespace python
}  // namespace frameshard

PYBIND11_MODULE(_C, m) {
  namespace fp = frameshard::python;
  m.doc() = "frameshard C++ core (use the `frameshard` package instead)";
  // One class that is both a ValueError (a caller mistake) and a
  // RuntimeError (what torch raises for c10::Error).
  py::object error = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(&PyType_Type))(
      "FrameshardError",
      py::make_tuple(
          py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError)),
      py::dict(
          py::arg("__module__") = "frameshard",
          py::arg("__doc__") =
              "An error raised by frameshard's C++ core, with its message."));
  fp::g_error_type = error.release().ptr();  // lives as long as the process
  m.attr("FrameshardError") = py::handle(fp::g_error_type);
  py::register_local_exception_translator(&fp::translate_errors);
  m.attr("torch_version") = FRAMESHARD_TORCH_VERSION;
  fp::init_config(m);
  fp::init_runtime(m);
}
