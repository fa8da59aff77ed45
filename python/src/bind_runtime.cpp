// frameshard._C: the collectives, all_gather_rows, agree, encode and
// encode_mesh with a Python tower (bindings.h). The GIL is released while
// they run (bindings.cpp). A Python tower that takes pieces gets a split
// plan's pieces and its K/V exchange (frameshard/tower.h PieceExchange) as
// a Python callable.
#include "bind_online.h"
#include "bindings.h"

#include <frameshard/dedup.h>
#include <frameshard/error.h>
#include <frameshard/runtime/agree.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/frame_keys.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/mesh_encode.h>
#include <frameshard/tower.h>

#include <c10/core/impl/VirtualGuardImpl.h>

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

/// The device agree_values exchanges on: CPU when the group has a backend
/// for it (Gloo, or NCCL groups made with a CPU backend), else the current
/// CUDA device (an NCCL-only group).
c10::Device agree_device(const ProcessGroupPtr& group) {
  if (!group || group->hasBackendForDeviceType(c10::DeviceType::CPU) ||
      !group->hasBackendForDeviceType(c10::DeviceType::CUDA)) {
    return c10::Device(c10::kCPU);
  }
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice();
}

void agree_binding(
    const std::string& fn,
    const std::vector<std::string>& names,
    const std::vector<int64_t>& values,
    const ProcessGroupPtr& group,
    int64_t timeout_ms) {
  const c10::Device device = agree_device(group);
  py::gil_scoped_release no_gil;
  agree_values(group, fn, names, values, device, millis(timeout_ms));
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

/// What one sharded tower call needs besides its tensors and group, shared
/// by encode and encode_mesh (frameshard._C.ShardCall; the Python layer
/// fills it from shard_vision's arguments). `dp` is used by encode_mesh only
/// (its world is dp * cp_size); the others mean the same for both.
struct ShardCall {
  Overrides overrides;  // FrameShardingConfig.overrides()
  int64_t cp_size = 1;
  int64_t dp = 1;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  bool tower_trainable = true;
  int64_t timeout_ms = 0;              // 0: the group's own timeout
  std::vector<int64_t> token_owner;    // gather: owner (one CP rank per token)
  py::object tower_dims = py::none();  // TowerDims fields, or None
  bool takes_pieces = false;  // the tower declares `pieces` and `exchange`
  /// Its K/V exchanges per call, if declared (EncodeOptions::tower_exchanges)
  int64_t tower_exchanges = 0;
  /// frame_sharding.dedup: encode each distinct frame once, keyed by
  /// media_keys (one (hi, lo) per grid row) or, empty, by frame_keys.
  bool dedup = false;
  std::vector<std::pair<uint64_t, uint64_t>> media_keys;
  /// cost_alpha online: the model that plans this call (null: the config's).
  std::shared_ptr<OnlineRun> online;
};

// The unit keys of a dedup call (computed on the pixels' device).
std::vector<UnitKey> unit_keys_of(
    const ShardCall& c,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const MediaLayout& layout) {
  if (!c.dedup) {
    return {};
  }
  if (c.media_keys.empty()) {
    return frame_keys(pixel_values, grid_thw, layout);
  }
  std::vector<UnitKey> media;
  for (const auto& [hi, lo] : c.media_keys) {
    media.push_back({hi, lo});
  }
  return media_unit_keys(grid_from_tensor(grid_thw), media, layout);
}

py::dict dedup_dict(const FrameDedup& d) {
  py::dict out;
  out["units"] = d.units;
  out["distinct_units"] = d.distinct_units;
  out["patch_rows"] = d.patch_rows;
  out["distinct_patch_rows"] = d.distinct_patch_rows;
  out["tokens"] = d.tokens;
  out["distinct_tokens"] = d.distinct_tokens;
  return out;
}

// The plan options of a call with a Python tower over `world` ranks. A
// Python tower that does not take pieces is called with (pixel_values,
// grid_thw, cu_seqlens) only: it would encode a piece of a split frame as
// if it were a whole frame.
PlanOptions python_tower_plan(const ShardCall& c, int64_t world) {
  PlanOptions o = plan_options_from(
      c.overrides,
      world,
      c.spatial_merge_size,
      c.temporal_patch_size,
      c.tower_dims);
  FRAMESHARD_CHECK(
      c.takes_pieces || !o.split.enabled,
      "shard_vision",
      "split_frames: expected false for a Python tower that does not take "
      "pieces (keyword parameters `pieces` and `exchange`, see "
      "frameshard.shard_vision), got true");
  return c.online ? c.online->plan_options(std::move(o)) : o;
}

// What encode and encode_mesh return to Python (named, read-only fields:
// ShardResult in init_shard_result).
struct ShardResult {
  std::vector<at::Tensor> outputs;
  py::dict plan;
  int64_t bytes_sent = 0;
  std::vector<int64_t> tokens;
  py::object replica_tokens = py::none();
  py::object dedup = py::none();
  py::object mesh = py::none();
};

// What the mesh step ran and why (frameshard/mesh_plan.h MeshChoice).
py::dict mesh_choice_dict(const MeshPlan& mp) {
  py::dict d;
  d["mode"] = to_string(mp.mode);
  d["weighed"] = mp.choice.weighed;
  d["gain"] = mp.choice.gain();
  d["reason"] = mp.choice.reason;
  d["mesh_seconds"] = mp.choice.mesh.total();
  d["cp_only_seconds"] = mp.choice.cp_only.total();
  return d;
}

// The fields of both; `dedup`: the counts to return (call.dedup), or null.
ShardResult shard_result(EncodeResult& res, const FrameDedup* dedup) {
  ShardResult out;
  out.outputs = std::move(res.outputs);
  out.plan = plan_dict(res.plan);
  out.bytes_sent = res.bytes_sent;
  out.tokens = std::move(res.tokens);
  if (dedup != nullptr) {
    out.dedup = dedup_dict(*dedup);
  }
  return out;
}

// The options of a call with a Python tower over `world` ranks (encode:
// cp_size; encode_mesh: dp * cp_size); the mesh fields are encode_mesh's.
EncodeOptions call_options(const ShardCall& call, int64_t world) {
  EncodeOptions o;
  o.token_owner = call.token_owner;
  o.plan = python_tower_plan(call, world);
  o.tower_trainable = call.tower_trainable;
  o.tower_exchanges = call.tower_exchanges;
  o.timeout = millis(call.timeout_ms);
  return o;
}

// Runs `run` (encode or encode_mesh) with the GIL released, the unit keys
// computed there too.
template <typename Run>
EncodeResult run_without_gil(
    const ShardCall& call,
    EncodeOptions& o,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const Run& run) {
  py::gil_scoped_release no_gil;
  o.unit_keys = unit_keys_of(call, pixel_values, grid_thw, o.plan.layout);
  return run(o);
}

ShardResult encode_binding(
    const py::object& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const ShardCall& call) {
  EncodeOptions o = call_options(call, call.cp_size);
  const VisionTower cpp_tower = python_tower(tower, call.takes_pieces);
  EncodeResult res = run_without_gil(
      call, o, pixel_values, grid_thw, [&](const EncodeOptions& eo) {
        return encode(cpp_tower, pixel_values, grid_thw, group, eo);
      });
  return shard_result(res, call.dedup ? &res.dedup : nullptr);
}

ShardResult encode_mesh_binding(
    const py::object& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const ShardCall& call) {
  // The config's world is the mesh's (encode_mesh sets it to dp * cp).
  EncodeOptions o = call_options(call, call.dp * call.cp_size);
  o.mesh.dp = call.dp;
  o.mesh.cp = call.cp_size;
  const Config cfg = config_from(call.overrides, call.cp_size);
  o.mesh.min_gain = cfg.frame_sharding.mesh_min_gain;
  o.mesh.exchange_latency_seconds =
      cfg.frame_sharding.split_exchange_latency_us * 1e-6;

  o.mesh.dedup = call.dedup;
  const VisionTower cpp_tower = python_tower(tower, call.takes_pieces);
  EncodeResult res = run_without_gil(
      call, o, pixel_values, grid_thw, [&](const EncodeOptions& eo) {
        return encode_mesh(cpp_tower, pixel_values, grid_thw, mesh_group, eo);
      });
  ShardResult out = shard_result(res, call.dedup ? &res.mesh.dedup : nullptr);
  out.replica_tokens = py::cast(res.mesh.replica_tokens);
  out.mesh = mesh_choice_dict(res.mesh);
  return out;
}

void init_shard_result(py::module_& m) {
  py::class_<ShardResult>(m, "ShardResult", R"doc(What encode and encode_mesh
return: outputs (the tower's outputs, one tensor each), plan (the plan
dict), bytes_sent, tokens (owned token indices with call.token_owner),
replica_tokens (encode_mesh: the replicas' token offsets; else None), dedup
(the dedup counts with call.dedup; encode_mesh: mesh-wide; else None), mesh
(encode_mesh: the mesh choice dict, mode, weighed, gain, reason,
mesh_seconds, cp_only_seconds; else None). Read-only.)doc")
      .def_readonly("outputs", &ShardResult::outputs)
      .def_readonly("plan", &ShardResult::plan)
      .def_readonly("bytes_sent", &ShardResult::bytes_sent)
      .def_readonly("tokens", &ShardResult::tokens)
      .def_readonly("replica_tokens", &ShardResult::replica_tokens)
      .def_readonly("dedup", &ShardResult::dedup)
      .def_readonly("mesh", &ShardResult::mesh);
}

void init_shard_call(py::module_& m) {
  py::class_<ShardCall>(m, "ShardCall", R"doc(The options of one sharded tower
call (encode, encode_mesh); every field has a default. `fields()` lists
them, so the Python layer can check that it sets each one.)doc")
      .def(py::init<>())
      .def_readwrite("overrides", &ShardCall::overrides)
      .def_readwrite("cp_size", &ShardCall::cp_size)
      .def_readwrite("dp", &ShardCall::dp)
      .def_readwrite("spatial_merge_size", &ShardCall::spatial_merge_size)
      .def_readwrite("temporal_patch_size", &ShardCall::temporal_patch_size)
      .def_readwrite("tower_trainable", &ShardCall::tower_trainable)
      .def_readwrite("timeout_ms", &ShardCall::timeout_ms)
      .def_readwrite("token_owner", &ShardCall::token_owner)
      .def_readwrite("tower_dims", &ShardCall::tower_dims)
      .def_readwrite("takes_pieces", &ShardCall::takes_pieces)
      .def_readwrite("tower_exchanges", &ShardCall::tower_exchanges)
      .def_readwrite("online", &ShardCall::online)
      .def_readwrite("dedup", &ShardCall::dedup)
      .def_readwrite("media_keys", &ShardCall::media_keys)
      .def_static("fields", [] {
        return std::vector<std::string>{
            "overrides",
            "cp_size",
            "dp",
            "spatial_merge_size",
            "temporal_patch_size",
            "tower_trainable",
            "timeout_ms",
            "token_owner",
            "tower_dims",
            "takes_pieces",
            "tower_exchanges",
            "online",
            "dedup",
            "media_keys"};
      });
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
      "agree",
      &agree_binding,
      py::arg("fn"),
      py::arg("names"),
      py::arg("values"),
      py::arg("group"),
      py::arg("timeout_ms") = 0,
      R"doc(Argument consensus (frameshard::agree_values): returns when every
rank of `group` passed the same names and values; otherwise every rank
raises the same FrameshardError, "frameshard::<fn>: [rank r/W] ranks
disagree on <name>: rank 0 has X, rank k has Y" (the first differing name).
Collective; the GIL is released while it runs.)doc");
  init_shard_call(m);
  init_shard_result(m);
  m.def(
      "frame_keys",
      [](const at::Tensor& pixel_values,
         const at::Tensor& grid_thw,
         int64_t spatial_merge_size,
         int64_t temporal_patch_size) {
        std::vector<UnitKey> keys;
        {
          py::gil_scoped_release no_gil;
          keys = frame_keys(
              pixel_values,
              grid_thw,
              MediaLayout{spatial_merge_size, temporal_patch_size});
        }
        std::vector<std::pair<uint64_t, uint64_t>> out;
        for (const UnitKey& k : keys) {
          out.emplace_back(k.hi, k.lo);
        }
        return out;
      },
      py::arg("pixel_values"),
      py::arg("grid_thw"),
      py::arg("spatial_merge_size") = 2,
      py::arg("temporal_patch_size") = 2,
      R"doc(The 128-bit content key (hi, lo) of every frame unit
(frameshard::frame_keys): a hash of its pixel rows, dtype and shape,
computed on the pixels' device. Not collective.)doc");
  m.def(
      "encode",
      &encode_binding,
      py::arg("tower"),
      py::arg("pixel_values"),
      py::arg("grid_thw"),
      py::arg("group"),
      py::arg("call"),
      R"doc(frameshard::encode with a Python tower: returns a ShardResult
(replica_tokens and mesh None). call: a ShardCall; call.dedup encodes each distinct frame once.
With call.token_owner (one CP rank per visual token) each rank gets only
its rows. call.takes_pieces: the tower is also called with pieces= (a list
of (frame, begin, end, h, w)) and exchange= (a differentiable callable on
[local rows, F], or None without a split plan), and the plan may split
frames. Collective.)doc");
  m.def(
      "encode_mesh",
      &encode_mesh_binding,
      py::arg("tower"),
      py::arg("pixel_values"),
      py::arg("grid_thw"),
      py::arg("mesh_group"),
      py::arg("call"),
      R"doc(frameshard::encode_mesh with a Python tower over a dp x cp mesh
group (call.dp x call.cp_size; mesh rank = replica * cp + cp rank; each
rank passes its own replica's pixel_values and grid_thw): returns a
ShardResult (outputs of this replica, the pooled plan dict, ...). Empty
outputs: a text-only replica on the replicated path. Collective over the
mesh group.)doc");
}

}  // namespace python
}  // namespace frameshard
