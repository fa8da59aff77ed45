// frameshard._C: the collectives, all_gather_rows, encode and encode_mesh
// with a Python tower (bindings.h). The GIL is released while they run
// (bindings.cpp). A Python tower that takes pieces gets a split plan's
// pieces and its K/V exchange (frameshard/tower.h PieceExchange) as a
// Python callable.
#include "bindings.h"

#include <frameshard/error.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/mesh_encode.h>
#include <frameshard/tower.h>

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
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

/// A split plan's PieceExchange as seen from Python, for one tower call: the
/// exchange runs only while that call lasts (a later call, e.g. from a
/// recomputation, would be out of step with the peers' collectives), and an
/// exception it raises is kept, so that the tower's failure can be rethrown
/// as raised (the same error every rank raises inside its exchange).
struct ExchangeSlot {
  PieceExchange fn;
  bool open = true;
  std::exception_ptr error;
};

/// The Python callable `exchange(rows)` of a tower call: the GIL is released
/// while the collective runs; the result is the C++ autograd op's, so
/// gradients flow back through it.
py::cpp_function python_exchange(const std::shared_ptr<ExchangeSlot>& slot) {
  return py::cpp_function(
      [slot](const at::Tensor& rows) {
        FRAMESHARD_CHECK(
            slot->open,
            "shard_vision",
            "expected exchange(rows) to be called while the tower call that "
            "received it runs, got a call after that call returned");
        py::gil_scoped_release no_gil;
        try {
          return slot->fn(rows);
        } catch (...) {
          slot->error = std::current_exception();
          throw;
        }
      },
      py::arg("rows"));
}

/// The pieces of a tower input as Python tuples (frame, begin, end, h, w):
/// the local frame (cu_seqlens segment), the piece's rows [begin, end) of
/// that frame's h*w rows, and the whole frame's patch rows and columns.
py::list python_pieces(const TowerInput& in) {
  py::list out;
  if (in.pieces.empty()) {
    return out;
  }
  // Local frame -> its grid row's (h, w): each grid row holds t frames.
  std::vector<std::pair<int64_t, int64_t>> frame_hw;
  for (const GridThw& g : grid_from_tensor(in.grid_thw)) {
    frame_hw.insert(frame_hw.end(), static_cast<size_t>(g.t), {g.h, g.w});
  }
  for (const FramePiece& p : in.pieces) {
    FRAMESHARD_CHECK(
        p.frame >= 0 && p.frame < static_cast<int64_t>(frame_hw.size()),
        "shard_vision",
        "expected pieces of local frames in [0, ",
        frame_hw.size(),
        "), got frame ",
        p.frame);
    const auto& hw = frame_hw[static_cast<size_t>(p.frame)];
    out.append(py::make_tuple(p.frame, p.begin, p.end, hw.first, hw.second));
  }
  return out;
}

/// The Python callable as a VisionTower: called with the GIL held; it must
/// return a list of tensors (the Python layer normalises what the user's
/// tower returns). A Python exception becomes a std::runtime_error with its
/// text while the GIL is still held (the error object needs it to die); an
/// error its piece exchange raised is rethrown as raised instead.
/// Captures a pointer, not a copy: copying a py::object touches its
/// reference count, which needs the GIL, and encode runs without it.
/// `takes_pieces`: the callable also takes `pieces=` (python_pieces) and
/// `exchange=` (python_exchange, or None without a split plan).
VisionTower python_tower(const py::object& tower, bool takes_pieces) {
  const py::object* fn = &tower;  // outlives the encode call
  return [fn, takes_pieces](const TowerInput& in) {
    py::gil_scoped_acquire gil;
    auto slot = std::make_shared<ExchangeSlot>();
    slot->fn = in.exchange;
    try {
      py::object out;
      if (takes_pieces) {
        py::object exchange = in.exchange ? py::object(python_exchange(slot))
                                          : py::object(py::none());
        out = (*fn)(
            in.pixel_values,
            in.grid_thw,
            in.cu_seqlens,
            py::arg("pieces") = python_pieces(in),
            py::arg("exchange") = exchange);
      } else {
        out = (*fn)(in.pixel_values, in.grid_thw, in.cu_seqlens);
      }
      slot->open = false;
      if (slot->error) {
        // The tower swallowed its exchange's failure; its peers raised it.
        std::rethrow_exception(slot->error);
      }
      return out.cast<std::vector<at::Tensor>>();
    } catch (py::error_already_set& e) {
      slot->open = false;
      if (slot->error) {
        std::rethrow_exception(slot->error);
      }
      // "KeyError: 'boom'", without the Python traceback e.what() appends.
      throw std::runtime_error(
          py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
          py::str(e.value()).cast<std::string>());
    } catch (const py::cast_error& e) {
      slot->open = false;
      throw std::runtime_error(
          std::string("expected the tower to return tensors, got "
                      "something else (") +
          e.what() + ")");
    }
  };
}

// The plan options of encode with a Python tower over `world` ranks. A
// Python tower that does not take pieces is called with (pixel_values,
// grid_thw, cu_seqlens) only: it would encode a piece of a split frame as
// if it were a whole frame.
PlanOptions python_tower_plan(
    const Overrides& overrides,
    int64_t world,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    const py::object& tower_dims,
    bool takes_pieces) {
  PlanOptions o = plan_options_from(
      overrides, world, spatial_merge_size, temporal_patch_size, tower_dims);
  FRAMESHARD_CHECK(
      takes_pieces || !o.split.enabled,
      "shard_vision",
      "split_frames: expected false for a Python tower that does not take "
      "pieces (keyword parameters `pieces` and `exchange`, see "
      "frameshard.shard_vision), got true");
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
    const py::object& tower_dims,
    bool takes_pieces) {
  EncodeOptions o;
  o.token_owner = token_owner;
  o.plan = python_tower_plan(
      overrides,
      cp_size,
      spatial_merge_size,
      temporal_patch_size,
      tower_dims,
      takes_pieces);
  o.tower_trainable = tower_trainable;
  o.timeout = millis(timeout_ms);
  const VisionTower cpp_tower = python_tower(tower, takes_pieces);
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
    const py::object& tower_dims,
    bool takes_pieces) {
  MeshEncodeOptions o;
  o.dp = dp;
  o.cp = cp;
  o.token_owner = token_owner;
  // The config's world is the mesh's (encode_mesh sets it to dp * cp).
  o.plan = python_tower_plan(
      overrides,
      dp * cp,
      spatial_merge_size,
      temporal_patch_size,
      tower_dims,
      takes_pieces);
  o.tower_trainable = tower_trainable;
  o.timeout = millis(timeout_ms);
  const VisionTower cpp_tower = python_tower(tower, takes_pieces);
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
      py::arg("takes_pieces") = false,
      R"doc(frameshard::encode with a Python tower: returns
(outputs, plan dict, bytes sent, owned token indices). With token_owner
(one CP rank per visual token) each rank gets only its rows. takes_pieces:
the tower is also called with pieces= (a list of (frame, begin, end, h, w))
and exchange= (a differentiable callable on [local rows, F], or None
without a split plan), and the plan may split frames. Collective.)doc");
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
      py::arg("takes_pieces") = false,
      R"doc(frameshard::encode_mesh with a Python tower over a dp x cp mesh
group (mesh rank = replica * cp + cp rank; each rank passes its own
replica's pixel_values and grid_thw): returns (outputs of this replica,
the pooled plan dict, bytes sent, owned token indices, the replicas' token
offsets). Empty outputs: a text-only replica on the replicated path.
Collective over the mesh group.)doc");
}

}  // namespace python
}  // namespace frameshard
