// Encode over the dp x cp mesh (include/frameshard/runtime/mesh_encode.h
// for the steps and the gradient semantics).
//
// Hang-freedom rests on the invariant of encode: with a mesh of more than
// one rank, every rank issues the same collectives in the same order. What
// can fail locally before the payload moves (the inputs, the options) is
// caught and travels in the metadata record (runtime/mesh_metadata.h);
// after the checks every rank holds the same records, so planning and the
// routes are the same everywhere and cannot fail on one rank only. What can
// fail in the tower is caught and joins encode's consensus
// (runtime/consensus.h), before the output all-to-all.
#include <frameshard/runtime/mesh_encode.h>

#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/route.h>

#include "runtime/collectives.h"
#include "runtime/consensus.h"
#include "runtime/encode_steps.h"
#include "runtime/fault.h"
#include "runtime/mesh_metadata.h"
#include "runtime/piece_exchange.h"
#include "tower/check.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace frameshard {

namespace {

constexpr const char* kMeshEncodeFn = "encode_mesh";

/// res.plan and res.mesh: the mesh plan that ran.
void set_plan(EncodeResult& res, MeshPlan mp) {
  res.plan = mp.plan;
  res.mesh = std::move(mp);
}

/// What one call works with.
struct MeshCall {
  MeshCall(
      const VisionTower& t,
      const at::Tensor& px,
      const ProcessGroupPtr& g,
      const EncodeOptions& o)
      : tower(t),
        pixel_values(px),
        group(g),
        options(o),
        rank(g->getRank()),
        world(g->getSize()),
        prefix(internal::rank_prefix(kMeshEncodeFn, g)),
        device(px.defined() ? px.device() : c10::Device(at::kCPU)) {}

  const VisionTower& tower;
  const at::Tensor& pixel_values;
  const ProcessGroupPtr& group;
  const EncodeOptions& options;
  int rank;
  int world;
  std::string prefix;
  c10::Device device;
  std::vector<GridThw> grid;  // this replica's, once checked
};

/// This rank's metadata record: its inputs and options, or why they fail
/// the checks that need no peer. Sets c.grid.
internal::MeshRecord check_local_inputs(
    MeshCall& c, const at::Tensor& grid_thw) {
  const EncodeOptions& o = c.options;
  const MeshOptions& m = o.mesh;
  internal::MeshRecord mine;
  mine.dp = m.dp;
  mine.cp = m.cp;
  mine.options = internal::plan_options_fingerprint(
      o.plan, m.dp, m.cp, m.min_gain, m.exchange_latency_seconds);
  mine.tower_trainable = o.tower_trainable;
  // Dedup is a mesh-wide choice: part of the options every rank compares;
  // so is where a CP-only step runs (over cp_group or the mesh's routes).
  if (m.dedup) {
    mine.options ^= 0x5d5d5d5d5d5d5d5dULL;
  }
  if (m.cp_group) {
    mine.options ^= 0x3c3c3c3c3c3c3c3cULL;
  }
  try {
    TORCH_CHECK(
        m.dp >= 1 && m.dp <= kMaxMeshReplicas && m.cp >= 1 &&
            m.cp <= kMaxMeshReplicas,
        c.prefix,
        "expected dp and cp in [1, ",
        kMaxMeshReplicas,
        "], got dp=",
        m.dp,
        " cp=",
        m.cp);
    TORCH_CHECK(
        m.dp * m.cp == c.world,
        c.prefix,
        "expected a mesh group of dp * cp = ",
        m.dp * m.cp,
        " ranks (mesh rank = replica * cp + cp_rank), got ",
        c.world,
        o.tower_trainable ? " (a trainable tower's gradient all-reduce must "
                            "span that whole mesh)"
                          : "");
    TORCH_CHECK(
        static_cast<bool>(c.tower),
        c.prefix,
        "expected a callable tower, got an empty function");
    TORCH_CHECK(
        std::isfinite(m.other_seconds) && m.other_seconds >= 0.0,
        c.prefix,
        "expected other_seconds finite and >= 0, got ",
        m.other_seconds);
    mine.other_seconds = m.other_seconds;
    internal::check_cp_group(m.cp_group, m.cp, c.rank, c.prefix);
    const at::Tensor& px = c.pixel_values;
    TORCH_CHECK(
        px.defined() && px.dim() == 2,
        c.prefix,
        "expected pixel_values to be a 2-D [patch_rows, features] tensor "
        "([0, features] for a text-only replica), got ",
        px.defined() ? internal::shape_text(px) : "an undefined tensor");
    mine.dtype = static_cast<int64_t>(px.scalar_type());
    mine.features = px.size(1);
    std::vector<GridThw> grid = grid_from_tensor(grid_thw);
    const FrameSet frames = expand_frames(grid, o.plan.layout);
    check_pixel_rows(frames, px.size(0));
    internal::check_token_owner(
        o.token_owner, frames.total_tokens, m.cp, c.prefix);
    mine.tokens = frames.total_tokens;
    if (m.dedup) {
      TORCH_CHECK(
          o.unit_keys.size() == frames.units.size(),
          c.prefix,
          "expected one unit key per frame unit of this replica (",
          frames.units.size(),
          "), got ",
          o.unit_keys.size());
    }
    mine.grid = std::move(grid);
    mine.owner_mode = !o.token_owner.empty();
    mine.owner_fp = internal::owner_fingerprint(o.token_owner);
    if (c.rank % m.cp == 0) {
      mine.owners = o.token_owner;  // the replica's map travels once
      mine.keys = o.unit_keys;
    }
    mine.keys_fp = m.dedup ? internal::keys_fingerprint(o.unit_keys) : 0;
  } catch (...) {
    mine.ok = false;
    mine.error = "while checking its inputs: " +
                 detail::exception_text(std::current_exception());
  }
  c.grid = mine.grid;
  return mine;
}

/// Step (b), from checked records: the same inputs on every rank, so a
/// failure here happens on every rank alike.
MeshPlan plan_mesh(
    const std::vector<internal::MeshRecord>& records, const MeshCall& c) {
  MeshPlanOptions mo;
  mo.dp = c.options.mesh.dp;
  mo.cp = c.options.mesh.cp;
  mo.plan = c.options.plan;
  mo.min_gain = c.options.mesh.min_gain;
  mo.exchange_latency_seconds = c.options.mesh.exchange_latency_seconds;
  // The route model's pixel row: the real one, once any rank has pixels.
  for (const internal::MeshRecord& r : records) {
    if (r.dtype >= 0 && r.features > 0) {
      mo.pixel_row_bytes =
          r.features * static_cast<int64_t>(c10::elementSize(
                           static_cast<c10::ScalarType>(r.dtype)));
      break;
    }
  }
  std::vector<std::vector<GridThw>> replicas;
  for (size_t first = 0; first < records.size();
       first += static_cast<size_t>(mo.cp)) {
    replicas.push_back(records[first].grid);
    // A replica's rest of the step: its slowest cp rank's.
    double other = 0.0;
    for (size_t k = first; k < first + static_cast<size_t>(mo.cp); ++k) {
      other = std::max(other, records[k].other_seconds);
    }
    mo.replica_other_seconds.push_back(other);
  }
  try {
    return make_mesh_plan(replicas, mo, internal::replica_keys(records));
  } catch (const std::exception& e) {
    TORCH_CHECK(
        false, c.prefix, "every rank failed while planning: ", e.what());
  }
}

/// Runs `local` (the tower and its checks), then encode's consensus: a
/// failure in `local` joins it as this rank's error, unless the piece
/// exchange raised it on every rank already. One rank: no consensus,
/// errors propagate as raised.
std::vector<internal::ConsensusRecord> run_and_agree(
    const MeshCall& c,
    const std::vector<int64_t>& expected_rows,
    const internal::PieceExchangeState& exchange,
    const std::function<void(internal::ConsensusRecord&, std::string&)>&
        local) {
  internal::ConsensusRecord mine;
  mine.grad_mode = at::GradMode::is_enabled();
  std::string stage;
  if (c.world == 1) {
    local(mine, stage);
    return {mine};
  }
  try {
    local(mine, stage);
  } catch (...) {
    if (exchange.raised) {
      throw;  // every rank raised it already, inside the tower's exchange
    }
    mine.ok = false;
    mine.error =
        stage + ": " + detail::exception_text(std::current_exception());
  }
  internal::fault_point("consensus", c.rank);
  return internal::run_consensus(
      c.group, mine, expected_rows, c.device, c.options.timeout, kMeshEncodeFn);
}

/// The replicated path: each rank encodes its own replica's frames (with
/// dedup, each distinct frame of its replica once).
EncodeResult encode_replicated(
    const MeshCall& c,
    MeshPlan mp,
    const std::vector<internal::MeshRecord>& records) {
  const int64_t cp = c.options.mesh.cp;
  const auto keys = internal::replica_keys(records);
  std::vector<FrameDedup> dedup(static_cast<size_t>(c.options.mesh.dp));
  std::vector<int64_t> expected(static_cast<size_t>(c.world));
  for (int64_t m = 0; m < c.world; ++m) {
    const int64_t q = m / cp;
    expected[m] = mp.replica_tokens[q + 1] - mp.replica_tokens[q];
    if (!keys.empty() && expected[m] > 0) {
      if (m % cp == 0) {
        dedup[q] =
            dedup_frames(records[m].grid, keys[q], c.options.plan.layout);
      }
      expected[m] = dedup[q].distinct_tokens;
    }
  }
  const FrameDedup& mine_dedup = dedup[c.rank / cp];
  internal::LocalOutputs lo;
  const internal::PieceExchangeState no_exchange;
  run_and_agree(c, expected, no_exchange, [&](auto& mine, auto& stage) {
    mine.fingerprint = mp.plan.fingerprint;
    mine.path = 1;
    mine.rows = 0;
    if (c.grid.empty()) {
      return;  // a text-only replica: no tower, no outputs (dtype -1)
    }
    lo = internal::run_tower_step(
        c.tower,
        whole_frames_input(
            internal::distinct_pixels(c.pixel_values, mine_dedup),
            mine_dedup.identity() ? c.grid : mine_dedup.grid),
        expected[c.rank],
        "the merged tokens of its replica's distinct frames",
        -1,
        c.rank,
        c.prefix,
        stage);
    internal::describe_outputs(lo, false, mine);
  });
  internal::expand_uses(mine_dedup, lo.outputs);
  EncodeResult res;
  if (!c.options.token_owner.empty()) {
    res.tokens = internal::owned_rows(c.options.token_owner, c.rank % cp);
    internal::select_rows(lo.outputs, res.tokens);
  }
  res.outputs = std::move(lo.outputs);
  set_plan(res, std::move(mp));
  if (!keys.empty()) {
    // What the towers encoded: each replica's distinct frames, not the
    // mesh's (a frame in two replicas was encoded in both).
    FrameDedup& d = res.mesh.dedup;
    d.distinct_units = d.distinct_patch_rows = d.distinct_tokens = 0;
    for (const FrameDedup& q : dedup) {
      d.distinct_units += q.distinct_units;
      d.distinct_patch_rows += q.distinct_patch_rows;
      d.distinct_tokens += q.distinct_tokens;
    }
  }
  return res;
}

/// A CP-only step with a cp_group: frameshard::encode over this replica's
/// CP group, exactly as mesh_dims [cp] runs it (the replicas meet in no
/// further collective; a text-only replica runs nothing, as on the CP path).
EncodeResult encode_cp_only(
    const MeshCall& c, MeshPlan mp, const at::Tensor& grid_thw) {
  EncodeResult res;
  if (!c.grid.empty()) {
    // encode over the CP group: the same options, world cp.
    EncodeOptions eo = c.options;
    eo.plan.world = c.options.mesh.cp;
    eo.group_spans_only_cp = true;
    if (!c.options.mesh.dedup) {
      eo.unit_keys.clear();
    }
    res =
        encode(c.tower, c.pixel_values, grid_thw, c.options.mesh.cp_group, eo);
    // The plan is the mesh's (below); no all-gather to compare with.
    res.allgather_bytes_received = 0;
  }
  set_plan(res, std::move(mp));
  return res;
}

/// Step (c): this rank's real pixel rows, in its local order.
at::Tensor receive_pixels(
    const MeshCall& c, const MeshPlan& mp, EncodeResult& res) {
  const MeshPixelRoute px = mesh_pixel_route(mp, c.rank);
  // Detached: a differentiable all-to-all would need every rank in its
  // backward, and pixel values take no gradient.
  const at::Tensor pixels = c.pixel_values.detach();
  std::vector<at::Tensor> pieces;
  for (const RowRange& r : px.send_ranges) {
    pieces.push_back(pixels.narrow(0, r.begin, r.size()));
  }
  const at::Tensor send = pieces.empty()       ? pixels.narrow(0, 0, 0)
                          : pieces.size() == 1 ? pieces[0]
                                               : at::cat(pieces, 0);
  GatherOptions gopts;
  gopts.timeout = c.options.timeout;
  // The CP-only plan keeps every unit on its own replica's ranks, where the
  // pixels already are: every rank knows it, so all skip the exchange.
  at::Tensor recv =
      mp.mode == MeshMode::kCpOnly
          ? send
          : all_to_all_rows(
                send, px.send_counts, px.recv_counts, c.group, gopts);
  TORCH_INTERNAL_ASSERT(
      recv.size(0) == mp.plan.ranks[c.rank].real_patch_rows,
      "encode_mesh: the pixel route disagrees with the plan");
  const int64_t row = pixels.size(1) * pixels.element_size();
  const auto sum = [](const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), int64_t{0});
  };
  res.pixel_bytes_sent = (sum(px.send_counts) - px.send_counts[c.rank]) * row;
  res.pixel_bytes_received =
      (sum(px.recv_counts) - px.recv_counts[c.rank]) * row;
  return recv;
}

/// Step (f): every encoded row to the ranks of its replica that consume it.
void route_outputs(
    const MeshCall& c,
    const MeshPlan& mp,
    const std::vector<std::vector<int64_t>>& owners,
    const internal::LocalOutputs& lo,
    bool any_grad,
    EncodeResult& res) {
  const OwnerRoute route = mesh_output_route(mp, c.rank, owners);
  const at::Tensor fused = internal::joined_for_backward(lo.fused, any_grad);
  const auto device = fused.device();
  const auto index = [&](const std::vector<int64_t>& v) {
    return at::tensor(v, at::kLong).to(device);
  };
  GatherOptions gopts;
  gopts.timeout = c.options.timeout;
  internal::fault_point("gather", c.rank);
  // A row goes out once per consumer: index_select's backward then sums
  // the gradients of a replica's cp copies. Routes that stay on every rank
  // (the CP-only plan at cp 1; the plan says so to all ranks alike) need
  // no collective, forward or backward.
  at::Tensor out = fused.index_select(0, index(route.send_order));
  if (mp.mode != MeshMode::kCpOnly || mp.choice.cp_only.rows_in > 0) {
    out = all_to_all_rows(
        out, route.send_counts, route.recv_counts, c.group, gopts);
  }
  out = out.index_select(0, index(route.recv_order));
  res.outputs = internal::split_widths(out, lo.widths);
  if (!owners.empty()) {
    const int64_t first = mp.replica_tokens[mp.replica_of_rank(c.rank)];
    for (int64_t t : route.tokens) {
      res.tokens.push_back(t - first);
    }
  }
  const int64_t row = internal::row_bytes(lo.widths, fused.scalar_type());
  const auto sent = static_cast<int64_t>(route.send_order.size());
  res.bytes_sent += (sent - route.send_counts[c.rank]) * row;
  res.bytes_received +=
      (static_cast<int64_t>(route.tokens.size()) - route.recv_counts[c.rank]) *
      row;
}

/// The sharded path: steps (c) to (f).
EncodeResult encode_sharded(
    const MeshCall& c,
    MeshPlan mp,
    const std::vector<std::vector<int64_t>>& owners) {
  EncodeResult res;
  const at::Tensor real = receive_pixels(c, mp, res);
  const RankShard& shard = mp.plan.ranks[c.rank];
  auto exchange = std::make_shared<internal::PieceExchangeState>();
  internal::LocalOutputs lo;
  const auto records = run_and_agree(
      c, mp.plan.gather_counts, *exchange, [&](auto& mine, auto& stage) {
        mine.fingerprint = mp.plan.fingerprint;
        stage = "while preparing its tower input";
        TowerInput in = internal::shard_tower_input(shard, {real}, real);
        if (mp.plan.split && c.world > 1) {
          in.exchange = internal::make_piece_exchange(
              mp.plan,
              c.rank,
              c.group,
              c.device,
              c.options.timeout,
              exchange,
              kMeshEncodeFn);
        }
        lo = internal::run_tower_step(
            c.tower,
            in,
            shard.local_tokens,
            "local_tokens of the mesh plan: real, floor and dummy frames",
            shard.real_tokens,
            c.rank,
            c.prefix,
            stage);
        internal::describe_outputs(lo, true, mine);
      });
  route_outputs(c, mp, owners, lo, internal::any_requires_grad(records), res);
  res.bytes_sent += res.pixel_bytes_sent;
  res.bytes_received += res.pixel_bytes_received;
  set_plan(res, std::move(mp));
  return res;
}

}  // namespace

EncodeResult encode_mesh(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const EncodeOptions& options) {
  FRAMESHARD_TORCH_CHECK(
      mesh_group, kMeshEncodeFn, "expected a process group, got null");
  MeshCall c(tower, pixel_values, mesh_group, options);
  // (a) every rank's inputs, checked alike everywhere.
  const internal::MeshRecord mine = check_local_inputs(c, grid_thw);
  const auto records = internal::exchange_mesh_records(
      mesh_group, mine, c.device, options.timeout, kMeshEncodeFn);
  internal::check_mesh_records(records, c.prefix);
  // (b) the plan; then (c) to (f), or the replicated path.
  MeshPlan mp = plan_mesh(records, c);
  if (!mp.plan.sharded()) {
    return encode_replicated(c, std::move(mp), records);
  }
  if (mp.mode == MeshMode::kCpOnly && options.mesh.cp_group) {
    return encode_cp_only(c, std::move(mp), grid_thw);
  }
  return encode_sharded(c, std::move(mp), internal::replica_owners(records));
}

}  // namespace frameshard
