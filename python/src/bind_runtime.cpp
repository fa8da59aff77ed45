// frameshard._C: the collectives, all_gather_rows, encode and encode_mesh
// with a Python tower (bindings.h). The GIL is released while they run
// (bindings.cpp).
#include "bindings.h"

#include <frameshard/error.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/mesh_encode.h>
#include <frameshard/tower.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace frameshard {
namespace python {
namespace {

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

// The plan options of encode with a Python tower over `world` ranks. A
// Python tower is called with (pixel_values, grid_thw, cu_seqlens): it would
// encode a piece of a split frame as if it were a whole frame.
PlanOptions python_tower_plan(
    const Overrides& overrides,
    int64_t world,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    const py::object& tower_dims) {
  PlanOptions o = plan_options_from(
      overrides, world, spatial_merge_size, temporal_patch_size, tower_dims);
  FRAMESHARD_CHECK(
      !o.split.enabled,
      "shard_vision",
      "split_frames: expected false for a Python tower (it is not given the "
      "pieces of split frames nor their K/V exchange), got true");
  return o;
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
    const std::vector<int64_t>& token_owner,
    const py::object& tower_dims) {
  EncodeOptions o;
  o.token_owner = token_owner;
  o.plan = python_tower_plan(
      overrides, cp_size, spatial_merge_size, temporal_patch_size, tower_dims);
  o.tower_trainable = tower_trainable;
  o.timeout = millis(timeout_ms);
  const VisionTower cpp_tower = python_tower(tower);
  EncodeResult res;
  {
    py::gil_scoped_release no_gil;
    res = encode(cpp_tower, pixel_values, grid_thw, group, o);
  }
  return py::make_tuple(
      res.outputs, plan_dict(res.plan), res.bytes_sent, res.tokens);
}

py::tuple encode_mesh_binding(
    const py::object& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const Overrides& overrides,
    int64_t dp,
    int64_t cp,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    bool tower_trainable,
    int64_t timeout_ms,
    const std::vector<int64_t>& token_owner,
    const py::object& tower_dims) {
  MeshEncodeOptions o;
  o.dp = dp;
  o.cp = cp;
  o.token_owner = token_owner;
  // The config's world is the mesh's (encode_mesh sets it to dp * cp).
  o.plan = python_tower_plan(
      overrides, dp * cp, spatial_merge_size, temporal_patch_size, tower_dims);
  o.tower_trainable = tower_trainable;
  o.timeout = millis(timeout_ms);
  const VisionTower cpp_tower = python_tower(tower);
  MeshEncodeResult res;
  {
    py::gil_scoped_release no_gil;
    res = encode_mesh(cpp_tower, pixel_values, grid_thw, mesh_group, o);
  }
  return py::make_tuple(
      res.outputs,
      plan_dict(res.plan.plan),
      res.bytes_sent,
      res.tokens,
      res.plan.replica_tokens);
}

}  // namespace

void init_runtime(py::module_& m) {
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
      py::arg("tower_dims") = py::none(),
      R"doc(frameshard::encode with a Python tower: returns
(outputs, plan dict, bytes sent, owned token indices). With token_owner
(one CP rank per visual token) each rank gets only its rows. Collective.)doc");
  m.def(
      "encode_mesh",
      &encode_mesh_binding,
      py::arg("tower"),
      py::arg("pixel_values"),
      py::arg("grid_thw"),
      py::arg("mesh_group"),
      py::arg("overrides"),
      py::arg("dp"),
      py::arg("cp"),
      py::arg("spatial_merge_size"),
      py::arg("temporal_patch_size"),
      py::arg("tower_trainable"),
      py::arg("timeout_ms") = 0,
      py::arg("token_owner") = std::vector<int64_t>{},
      py::arg("tower_dims") = py::none(),
      R"doc(frameshard::encode_mesh with a Python tower over a dp x cp mesh
group (mesh rank = replica * cp + cp rank; each rank passes its own
replica's pixel_values and grid_thw): returns (outputs of this replica,
the pooled plan dict, bytes sent, owned token indices, the replicas' token
offsets). Empty outputs: a text-only replica on the replicated path.
Collective over the mesh group.)doc");
}

}  // namespace python
}  // namespace frameshard
