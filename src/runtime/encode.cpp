// Sharded encode (see include/frameshard/encode.h for the steps) and the
// consensus step that turns any local failure or cross-rank disagreement
// into the same error on every rank (src/internal/consensus.h).
//
// Hang-freedom rests on one invariant: with a group of size > 1, every rank
// issues exactly the same collectives in the same order. Per encode call:
//   one consensus all-gather (always, also on the replicated path, so a rank
//   that would shard while another replicates raises instead of hanging);
//   then, on the sharded path only, one forward alltoall (and one backward
//   alltoall on every rank when any rank needs a gradient).
// Everything that can fail locally (planning, slicing, the tower, the output
// checks) runs BEFORE the consensus and is caught there.

#include <frameshard/encode.h>

#include "internal/collectives.h"
#include "internal/consensus.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

namespace frameshard {

// ------------------------------------------------------------- consensus
namespace internal {
namespace {

constexpr int64_t kMagic = 0x46534e5343303031;  // "FSNSC001"
enum Word : int64_t {
  kWMagic = 0,
  kWOk,
  kWFingerprint,
  kWPath,
  kWRows,
  kWDtype,
  kWOutputs,
  kWWidthsHash,
  kWTotalWidth,
  kWRequiresGrad,
  kWGradMode,
  kWWidths,  // kConsensusListedWidths entries
  kWMessageLength = kWWidths + kConsensusListedWidths,
  kWMessage,  // kConsensusMessageBytes bytes
  kWords = kWMessage + kConsensusMessageBytes / 8,
};
static_assert(kConsensusMessageBytes % 8 == 0, "message packs into words");

int64_t widths_hash(const std::vector<int64_t>& widths) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
  for (int64_t w : widths) {
    h ^= static_cast<uint64_t>(w);
    h *= 1099511628211ull;
  }
  h ^= widths.size();
  h *= 1099511628211ull;
  int64_t out = 0;
  std::memcpy(&out, &h, sizeof(out));
  return out;
}

std::vector<int64_t> pack(const ConsensusRecord& r) {
  std::vector<int64_t> w(kWords, 0);
  w[kWMagic] = kMagic;
  w[kWOk] = r.ok ? 1 : 0;
  std::memcpy(&w[kWFingerprint], &r.fingerprint, sizeof(int64_t));
  w[kWPath] = r.path;
  w[kWRows] = r.rows;
  w[kWDtype] = r.dtype;
  w[kWOutputs] = static_cast<int64_t>(r.widths.size());
  w[kWWidthsHash] = widths_hash(r.widths);
  int64_t total = 0;
  for (int64_t x : r.widths) {
    total += x;
  }
  w[kWTotalWidth] = total;
  w[kWRequiresGrad] = r.requires_grad ? 1 : 0;
  w[kWGradMode] = r.grad_mode ? 1 : 0;
  for (int64_t i = 0; i < kConsensusListedWidths; ++i) {
    w[kWWidths + i] =
        i < static_cast<int64_t>(r.widths.size()) ? r.widths[i] : -1;
  }
  const auto len = std::min<int64_t>(
      static_cast<int64_t>(r.error.size()), kConsensusMessageBytes);
  w[kWMessageLength] = len;
  std::memcpy(&w[kWMessage], r.error.data(), static_cast<size_t>(len));
  return w;
}

struct Unpacked {
  ConsensusRecord record;
  int64_t magic = 0;
  int64_t outputs = 0;
  int64_t widths_hash = 0;
  int64_t total_width = 0;
};

Unpacked unpack(const int64_t* w) {
  Unpacked u;
  u.magic = w[kWMagic];
  u.record.ok = w[kWOk] != 0;
  std::memcpy(&u.record.fingerprint, &w[kWFingerprint], sizeof(int64_t));
  u.record.path = w[kWPath];
  u.record.rows = w[kWRows];
  u.record.dtype = w[kWDtype];
  u.outputs = w[kWOutputs];
  u.widths_hash = w[kWWidthsHash];
  u.total_width = w[kWTotalWidth];
  u.record.requires_grad = w[kWRequiresGrad] != 0;
  u.record.grad_mode = w[kWGradMode] != 0;
  const int64_t listed =
      std::min(std::max<int64_t>(u.outputs, 0), kConsensusListedWidths);
  for (int64_t i = 0; i < listed; ++i) {
    u.record.widths.push_back(w[kWWidths + i]);
  }
  const int64_t len = std::min(
      std::max<int64_t>(w[kWMessageLength], 0), kConsensusMessageBytes);
  u.record.error.assign(
      reinterpret_cast<const char*>(&w[kWMessage]), static_cast<size_t>(len));
  return u;
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

std::string path_name(int64_t p) {
  return p == 0 ? "sharded" : p == 1 ? "replicated" : "no";
}

std::string dtype_name(int64_t d) {
  if (d < 0 || d >= static_cast<int64_t>(c10::ScalarType::NumOptions)) {
    return "none";
  }
  return c10::toString(static_cast<c10::ScalarType>(d));
}

std::string widths_text(const Unpacked& u) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < u.record.widths.size(); ++i) {
    os << (i ? ", " : "") << u.record.widths[i];
  }
  if (u.outputs > kConsensusListedWidths) {
    os << ", ... (total " << u.total_width << ")";
  }
  os << "]";
  return os.str();
}

}  // namespace

std::vector<ConsensusRecord> run_consensus(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    const std::vector<int64_t>& expected_rows,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn) {
  const int world = group->getSize();
  const std::string prefix = rank_prefix(fn, group);
  const auto words = pack(mine);
  at::Tensor buffer =
      at::tensor(words, at::TensorOptions().dtype(at::kLong)).to(device);
  auto gathered = allgather_equal(group, buffer, timeout, fn);

  std::vector<Unpacked> all;
  for (const auto& t : gathered) {
    at::Tensor cpu = t.cpu().contiguous();
    TORCH_CHECK(
        cpu.numel() == kWords,
        prefix,
        "consensus record of ",
        cpu.numel(),
        " words, expected ",
        static_cast<int64_t>(kWords));
    all.push_back(unpack(cpu.data_ptr<int64_t>()));
  }

  for (int q = 0; q < world; ++q) {
    TORCH_CHECK(
        all[q].magic == kMagic,
        prefix,
        "rank ",
        q,
        " sent a consensus record of another format (mixed frameshard "
        "builds?)");
  }
  std::vector<int> failed;
  for (int q = 0; q < world; ++q) {
    if (!all[q].record.ok) {
      failed.push_back(q);
    }
  }
  if (!failed.empty()) {
    std::ostringstream os;
    if (failed.size() == 1) {
      os << "rank " << failed[0] << " failed " << all[failed[0]].record.error;
    } else {
      os << "ranks ";
      for (size_t i = 0; i < failed.size(); ++i) {
        os << (i ? ", " : "") << failed[i];
      }
      os << " failed; rank " << failed[0] << " failed "
         << all[failed[0]].record.error;
    }
    TORCH_CHECK(false, prefix, os.str());
  }
  for (int q = 1; q < world; ++q) {
    const auto& a = all[0].record;
    const auto& b = all[q].record;
    TORCH_CHECK(
        a.path == b.path,
        prefix,
        "ranks disagree on the plan: rank 0 takes ",
        "the ",
        path_name(a.path),
        " path, rank ",
        q,
        " the ",
        path_name(b.path),
        " path (different grid_thw or options?)");
    TORCH_CHECK(
        a.fingerprint == b.fingerprint,
        prefix,
        "ranks disagree on the plan fingerprint: rank 0 has ",
        hex(a.fingerprint),
        ", rank ",
        q,
        " has ",
        hex(b.fingerprint),
        " (different grid_thw or options?)");
  }
  for (int q = 1; q < world; ++q) {
    TORCH_CHECK(
        all[0].record.grad_mode == all[q].record.grad_mode,
        prefix,
        "ranks disagree on grad mode: rank 0 has it ",
        all[0].record.grad_mode ? "enabled" : "disabled",
        ", rank ",
        q,
        " has it ",
        all[q].record.grad_mode ? "enabled" : "disabled",
        " (a NoGradGuard on some ranks only would leave the others waiting "
        "in backward)");
    TORCH_CHECK(
        all[0].record.dtype == all[q].record.dtype,
        prefix,
        "ranks disagree on the output dtype: rank 0 has ",
        dtype_name(all[0].record.dtype),
        ", rank ",
        q,
        " has ",
        dtype_name(all[q].record.dtype));
    TORCH_CHECK(
        all[0].outputs == all[q].outputs,
        prefix,
        "ranks disagree on the number of tower outputs: rank 0 has ",
        all[0].outputs,
        ", rank ",
        q,
        " has ",
        all[q].outputs);
    TORCH_CHECK(
        all[0].widths_hash == all[q].widths_hash &&
            all[0].total_width == all[q].total_width &&
            all[0].record.widths == all[q].record.widths,
        prefix,
        "ranks disagree on the output widths: rank 0 has ",
        widths_text(all[0]),
        ", rank ",
        q,
        " has ",
        widths_text(all[q]));
  }
  TORCH_INTERNAL_ASSERT(static_cast<int>(expected_rows.size()) == world);
  for (int q = 0; q < world; ++q) {
    TORCH_CHECK(
        all[q].record.rows == expected_rows[q],
        prefix,
        "rank ",
        q,
        " contributes ",
        all[q].record.rows,
        " rows, the plan expects ",
        expected_rows[q]);
  }
  std::vector<ConsensusRecord> records;
  for (auto& u : all) {
    records.push_back(std::move(u.record));
  }
  return records;
}

}  // namespace internal

// ---------------------------------------------------------------- encode
namespace {

constexpr const char* kFn = "encode";

at::Tensor grid_tensor(const std::vector<GridThw>& grid, c10::Device device) {
  std::vector<int64_t> flat;
  flat.reserve(grid.size() * 3);
  for (const auto& g : grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  return at::tensor(flat, at::TensorOptions().dtype(at::kLong))
      .reshape({static_cast<int64_t>(grid.size()), 3})
      .to(device);
}

// Per-frame cumulative patch rows of `grid`: frames + 1 entries from 0.
std::vector<int64_t> frame_offsets(const std::vector<GridThw>& grid) {
  std::vector<int64_t> cu{0};
  for (const GridThw& g : grid) {
    for (int64_t f = 0; f < g.t; ++f) {
      cu.push_back(cu.back() + g.h * g.w);
    }
  }
  return cu;
}

at::Tensor cu_seqlens_tensor(
    const std::vector<int64_t>& cu,
    c10::Device device,
    const std::string& prefix) {
  std::vector<int32_t> cu32;
  cu32.reserve(cu.size());
  for (int64_t v : cu) {
    TORCH_CHECK(
        v >= 0 && v <= std::numeric_limits<int32_t>::max(),
        prefix,
        "expected cu_seqlens entries to fit int32, got ",
        v);
    cu32.push_back(static_cast<int32_t>(v));
  }
  return at::tensor(cu32, at::TensorOptions().dtype(at::kInt)).to(device);
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

/// What the local phase produced (everything before the consensus).
struct LocalPhase {
  ShardPlan plan;
  std::vector<at::Tensor> outputs;  // sharded: real rows only
  std::vector<int64_t> widths;
  at::Tensor fused;  // sharded: outputs fused along dim 1
};

void check_outputs(
    const std::vector<at::Tensor>& outs,
    int64_t expected_rows,
    const char* rows_meaning,
    const std::string& prefix) {
  TORCH_CHECK(
      !outs.empty(),
      prefix,
      "expected the tower to return at least "
      "one tensor, got none");
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    TORCH_CHECK(
        o.defined(),
        prefix,
        "expected tower output ",
        i,
        " to be a defined tensor, got an undefined one");
    TORCH_CHECK(
        o.dim() == 2,
        prefix,
        "expected tower output ",
        i,
        " to be a 2-D [rows, hidden] tensor, got shape ",
        shape_text(o));
    TORCH_CHECK(
        o.size(0) == expected_rows,
        prefix,
        "expected tower output ",
        i,
        " to have ",
        expected_rows,
        " rows (",
        rows_meaning,
        "), got ",
        o.size(0));
    TORCH_CHECK(
        o.scalar_type() == outs[0].scalar_type(),
        prefix,
        "expected all tower outputs to have one dtype (",
        outs[0].scalar_type(),
        "), got ",
        o.scalar_type(),
        " for output ",
        i);
    TORCH_CHECK(
        o.device() == outs[0].device(),
        prefix,
        "expected all tower outputs on one device (",
        outs[0].device(),
        "), got ",
        o.device(),
        " for output ",
        i);
  }
}

/// Planning, slicing, the tower and the output checks. `stage` names the
/// step that is running, for the consensus message.
LocalPhase run_local_phase(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    int rank,
    const EncodeOptions& options,
    const std::string& prefix,
    std::string& stage) {
  LocalPhase lp;
  stage = "while planning";
  TORCH_CHECK(
      pixel_values.defined() && pixel_values.dim() == 2,
      prefix,
      "expected pixel_values to be a 2-D [patch_rows, features] tensor, got ",
      pixel_values.defined() ? shape_text(pixel_values)
                             : "an undefined tensor");
  TORCH_CHECK(
      static_cast<bool>(tower),
      prefix,
      "expected a callable tower, got an empty function");
  lp.plan = make_plan(grid_from_tensor(grid_thw), options.plan);
  check_pixel_rows(lp.plan.frames, pixel_values.size(0));
  const c10::Device device = pixel_values.device();

  TowerInput in;
  int64_t expected_rows = 0;
  const char* rows_meaning = "";
  if (lp.plan.sharded()) {
    stage = "while slicing its pixel rows";
    const RankShard& shard = lp.plan.ranks.at(rank);
    std::vector<at::Tensor> pieces;
    for (const auto& r : shard.pixel_ranges) {
      pieces.push_back(pixel_values.narrow(0, r.begin, r.size()));
    }
    const int64_t zero_rows = shard.local_patch_rows - shard.real_patch_rows;
    if (zero_rows > 0) {
      // Floor and dummy frames: zeros, never merged with real media; their
      // output rows are dropped below, before the gather.
      pieces.push_back(
          at::zeros({zero_rows, pixel_values.size(1)}, pixel_values.options()));
    }
    in.pixel_values = pieces.empty()       ? pixel_values.narrow(0, 0, 0)
                      : pieces.size() == 1 ? pieces[0]
                                           : at::cat(pieces, 0);
    in.grid_thw = grid_tensor(shard.grid, device);
    in.cu_seqlens = cu_seqlens_tensor(shard.cu_seqlens, device, prefix);
    expected_rows = shard.local_tokens;
    rows_meaning = "local_tokens of the plan: real, floor and dummy frames";
  } else {
    in.pixel_values = pixel_values;
    in.grid_thw = grid_thw.to(device, at::kLong);
    in.cu_seqlens =
        cu_seqlens_tensor(frame_offsets(lp.plan.frames.grid), device, prefix);
    expected_rows = lp.plan.frames.total_tokens;
    rows_meaning = "the merged tokens of all frames";
  }

  stage = "while running the tower";
  std::vector<at::Tensor> outs = tower(in);
  stage = "while checking the tower outputs";
  check_outputs(outs, expected_rows, rows_meaning, prefix);
  for (const auto& o : outs) {
    lp.widths.push_back(o.size(1));
  }
  if (lp.plan.sharded()) {
    const int64_t real = lp.plan.ranks.at(rank).real_tokens;
    // Real frames come first in the local order: floor and dummy rows are
    // the tail, dropped here so they never enter the collective.
    for (auto& o : outs) {
      o = o.narrow(0, 0, real);
    }
    lp.fused = outs.size() == 1 ? outs[0] : at::cat(outs, 1);
  }
  lp.outputs = std::move(outs);
  stage = "after the tower";
  return lp;
}

std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "an unknown exception";
  }
}

/// After the consensus: the gather (sharded path) or the outputs as they
/// are (replicated path).
EncodeResult finish(
    LocalPhase lp,
    const ProcessGroupPtr& group,
    int rank,
    bool any_requires_grad,
    const EncodeOptions& options) {
  EncodeResult res;
  if (!lp.plan.sharded()) {
    res.outputs = std::move(lp.outputs);
    res.plan = std::move(lp.plan);
    return res;
  }
  at::Tensor send = lp.fused;
  if (any_requires_grad && !send.requires_grad()) {
    // Another rank will run backward through the gather, whose reduce-
    // scatter needs every rank: a fresh leaf makes this rank's gather part
    // of the graph too (Megatron-Bridge #4784: 0-image ranks hung). Its
    // gradient is discarded.
    send = send.detach().requires_grad_();
  }
  GatherOptions gopts;
  gopts.timeout = options.timeout;
  at::Tensor full = all_gather_rows(send, lp.plan.gather_counts, group, gopts);
  if (!lp.plan.restore_rows.empty()) {
    full = full.index_select(
        0, at::tensor(lp.plan.restore_rows, at::kLong).to(full.device()));
  }
  int64_t offset = 0;
  for (int64_t w : lp.widths) {
    res.outputs.push_back(
        lp.widths.size() == 1 ? full : full.narrow(1, offset, w));
    offset += w;
  }
  const int64_t row_bytes =
      offset * static_cast<int64_t>(c10::elementSize(send.scalar_type()));
  res.bytes_sent =
      gather_traffic(lp.plan.gather_counts, rank, row_bytes).unpadded_bytes;
  res.plan = std::move(lp.plan);
  return res;
}

}  // namespace

at::Tensor frame_cu_seqlens(
    const std::vector<GridThw>& grid, c10::Device device) {
  return cu_seqlens_tensor(
      frame_offsets(grid), device, "frameshard::frame_cu_seqlens: ");
}

std::vector<GridThw> grid_from_tensor(const at::Tensor& grid_thw) {
  TORCH_CHECK(
      grid_thw.defined(),
      "frameshard::grid_from_tensor: expected an integer [n, 3] tensor, got "
      "an undefined tensor");
  const bool integral = at::isIntegralType(grid_thw.scalar_type(), false);
  TORCH_CHECK(
      integral && grid_thw.dim() == 2 && grid_thw.size(1) == 3,
      "frameshard::grid_from_tensor: expected an integer [n, 3] tensor, got ",
      grid_thw.scalar_type(),
      " of shape ",
      shape_text(grid_thw));
  at::Tensor cpu = grid_thw.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = cpu.data_ptr<int64_t>();
  std::vector<GridThw> grid;
  grid.reserve(static_cast<size_t>(cpu.size(0)));
  for (int64_t i = 0; i < cpu.size(0); ++i) {
    grid.push_back(GridThw{p[3 * i], p[3 * i + 1], p[3 * i + 2]});
  }
  return grid;
}

EncodeResult encode(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const EncodeOptions& options) {
  TORCH_CHECK(group, "frameshard::encode: expected a process group, got null");
  const int rank = group->getRank();
  const int world = group->getSize();
  const std::string prefix = internal::rank_prefix(kFn, group);
  // Local checks that every rank computes from the same options: raising
  // here, before any collective, raises on every rank alike.
  TORCH_CHECK(
      options.plan.world == world,
      "frameshard: vision frame sharding cp_size=",
      options.plan.world,
      " does not match its process group (size ",
      world,
      ")");
  TORCH_CHECK(
      options.group_spans_only_cp || !options.tower_trainable,
      prefix,
      "expected a frozen tower (tower_trainable = false) when sharding over a "
      "group wider than CP (group_spans_only_cp = false), got a trainable "
      "tower: the tower is replicated across the extra ranks, so the "
      "gather's SUM backward would count its gradients once per replica");

  LocalPhase lp;
  std::string stage;
  if (world == 1) {
    // Nobody to wait for: errors propagate as raised (frameshard::Error
    // for a bad grid, the tower's own exception type, c10::Error).
    lp = run_local_phase(
        tower, pixel_values, grid_thw, rank, options, prefix, stage);
    return finish(std::move(lp), group, rank, false, options);
  }

  internal::ConsensusRecord mine;
  mine.grad_mode = at::GradMode::is_enabled();
  try {
    lp = run_local_phase(
        tower, pixel_values, grid_thw, rank, options, prefix, stage);
    mine.fingerprint = lp.plan.fingerprint;
    mine.path = lp.plan.sharded() ? 0 : 1;
    mine.dtype = static_cast<int64_t>(lp.outputs[0].scalar_type());
    mine.widths = lp.widths;
    if (lp.plan.sharded()) {
      mine.rows = lp.fused.size(0);
      mine.requires_grad = mine.grad_mode && lp.fused.requires_grad();
    } else {
      mine.rows = lp.outputs[0].size(0);
    }
  } catch (...) {
    mine.ok = false;
    mine.error = stage + ": " + exception_text(std::current_exception());
  }
  std::vector<int64_t> expected_rows;
  if (mine.ok) {
    expected_rows = lp.plan.sharded() ? lp.plan.gather_counts
                                      : std::vector<int64_t>(
                                            world, lp.plan.frames.total_tokens);
  } else {
    expected_rows.assign(world, -1);  // unused: the failure raises first
  }
  const c10::Device device =
      pixel_values.defined() ? pixel_values.device() : c10::Device(at::kCPU);
  const auto records = internal::run_consensus(
      group, mine, expected_rows, device, options.timeout, kFn);

  const bool any_requires_grad = std::any_of(
      records.begin(), records.end(), [](const internal::ConsensusRecord& r) {
        return r.requires_grad;
      });
  return finish(std::move(lp), group, rank, any_requires_grad, options);
}

}  // namespace frameshard
