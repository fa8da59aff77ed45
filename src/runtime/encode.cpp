// Sharded encode (see include/frameshard/runtime/encode.h for the steps) and
// the consensus step that turns any local failure or cross-rank disagreement
// into the same error on every rank (src/internal/consensus.h).
//
// Hang-freedom rests on one invariant: with a group of size > 1, every rank
// issues exactly the same collectives in the same order. Per encode call:
//   one consensus all-gather (always, also on the replicated path, so a rank
//   that would shard while another replicates raises instead of hanging);
//   then, on the sharded path only, one forward alltoall (and one backward
//   alltoall on every rank when any rank needs a gradient).
// Everything that can fail locally (planning, slicing, the tower, the output
// checks) runs BEFORE the consensus and is caught there. Split plans add,
// inside the tower, one exchange per full-attention layer on every rank,
// each opening with the same consensus record (runtime/piece_exchange.h): a
// rank whose tower raises meets its peers' next exchange with its failure.
// A tower that declares its exchanges (tower_exchanges) opens only the first
// with it; a rank whose tower raises after that first sends zeros through
// its peers' remaining exchanges and meets them at this consensus.

#include <frameshard/runtime/encode.h>

#include <frameshard/owner_route.h>
#include <frameshard/runtime/route.h>

#include "runtime/collectives.h"
#include "runtime/consensus.h"
#include "runtime/encode_steps.h"
#include "runtime/fault.h"
#include "runtime/piece_exchange.h"
#include "tower/check.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace frameshard {

// ---------------------------------------------------------------- encode
namespace {

constexpr const char* kEncodeFn = "encode";

/// What the local phase produced (everything before the consensus).
struct LocalPhase {
  std::vector<GridThw> grid;  // the caller's grid_thw, parsed once
  ShardPlan plan;
  FrameDedup dedup;            // with unit_keys; plan covers dedup.grid
  internal::LocalOutputs out;  // sharded: real rows only, fused
};

/// With unit_keys: the distinct units, and the pixel rows and grid_thw that
/// feed them (the originals when nothing repeats).
struct DistinctInput {
  at::Tensor pixel_values;
  at::Tensor grid_thw;
  std::vector<GridThw> grid;
};

DistinctInput distinct_input(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const std::vector<GridThw>& grid,
    const EncodeOptions& options,
    FrameDedup& dedup) {
  DistinctInput in{pixel_values, grid_thw, grid};
  if (options.unit_keys.empty()) {
    return in;
  }
  check_pixel_rows(
      expand_frames(in.grid, options.plan.layout), pixel_values.size(0));
  dedup = dedup_frames(in.grid, options.unit_keys, options.plan.layout);
  if (dedup.identity()) {
    return in;
  }
  in.pixel_values = internal::distinct_pixels(pixel_values, dedup);
  in.grid = dedup.grid;
  std::vector<int64_t> flat;
  for (const GridThw& g : dedup.grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  in.grid_thw = at::tensor(flat, at::kLong)
                    .view({static_cast<int64_t>(dedup.grid.size()), 3})
                    .to(grid_thw.device());
  return in;
}

/// Visual tokens of the caller's grid (uses, with dedup).
int64_t use_tokens(const LocalPhase& lp) {
  return lp.dedup.units > 0 ? lp.dedup.tokens : lp.plan.frames.total_tokens;
}

/// Local check of token_owner against the plan (before the consensus, so
/// that a bad map on one rank raises on all).
void check_token_owner(
    const EncodeOptions& options,
    int64_t tokens,
    int world,
    const std::string& prefix) {
  if (options.token_owner.empty()) {
    return;
  }
  TORCH_CHECK(
      static_cast<int64_t>(options.token_owner.size()) == tokens,
      prefix,
      "expected token_owner to have one entry per visual token (",
      tokens,
      "), got ",
      options.token_owner.size());
  for (int64_t o : options.token_owner) {
    TORCH_CHECK(
        o >= 0 && o < world,
        prefix,
        "expected token_owner entries in [0, ",
        world,
        "), got ",
        o);
  }
}

/// Planning, slicing, the tower and the output checks. `stage` names the
/// step that is running, for the consensus message.
LocalPhase run_local_phase(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const EncodeOptions& options,
    const std::string& prefix,
    const std::shared_ptr<internal::PieceExchangeState>& exchange,
    std::string& stage) {
  const int rank = group->getRank();
  LocalPhase lp;
  stage = "while planning";
  TORCH_CHECK(
      pixel_values.defined() && pixel_values.dim() == 2,
      prefix,
      "expected pixel_values to be a 2-D [patch_rows, features] tensor, got ",
      pixel_values.defined() ? internal::shape_text(pixel_values)
                             : "an undefined tensor");
  TORCH_CHECK(
      static_cast<bool>(tower),
      prefix,
      "expected a callable tower, got an empty function");
  lp.grid = grid_from_tensor(grid_thw);
  const DistinctInput distinct =
      distinct_input(pixel_values, grid_thw, lp.grid, options, lp.dedup);
  lp.plan = make_plan(distinct.grid, options.plan);
  check_pixel_rows(lp.plan.frames, distinct.pixel_values.size(0));
  check_token_owner(options, use_tokens(lp), options.plan.world, prefix);
  const c10::Device device = pixel_values.device();

  TowerInput in;
  int64_t expected_rows = 0;
  int64_t real_rows = -1;
  const char* rows_meaning = "";
  if (lp.plan.sharded()) {
    stage = "while slicing its pixel rows";
    in = local_tower_input(lp.plan, rank, distinct.pixel_values);
    if (lp.plan.split && group->getSize() > 1) {
      in.exchange = internal::make_piece_exchange(
          lp.plan, rank, group, device, options.timeout, exchange);
    }
    expected_rows = lp.plan.ranks.at(rank).local_tokens;
    real_rows = lp.plan.ranks.at(rank).real_tokens;
    rows_meaning = "local_tokens of the plan: real, floor and dummy frames";
  } else {
    in.pixel_values = distinct.pixel_values;
    in.grid_thw = distinct.grid_thw.to(device, at::kLong);
    in.cu_seqlens = frame_cu_seqlens(lp.plan.frames.grid, device);
    expected_rows = lp.plan.frames.total_tokens;
    rows_meaning = "the merged tokens of all frames";
  }
  lp.out = internal::run_tower_step(
      tower, in, expected_rows, rows_meaning, real_rows, rank, prefix, stage);
  return lp;
}

/// With declared exchanges, a tower that made fewer than it declared
/// fails (its peers' later exchanges get zeros from it first).
void check_exchanges(
    const internal::PieceExchangeState& exchange, const std::string& prefix) {
  TORCH_CHECK(
      exchange.declared == 0 || !exchange.play_along ||
          exchange.calls == exchange.declared,
      prefix,
      "expected the tower's declared ",
      exchange.declared,
      " K/V exchanges per call (tower_exchanges), got ",
      exchange.calls);
}

/// Owner mode on the sharded path: one all-to-all to the owners.
at::Tensor route_to_owners(
    const LocalPhase& lp,
    const at::Tensor& send,
    int rank,
    const ProcessGroupPtr& group,
    const EncodeOptions& options,
    EncodeResult& res) {
  OwnerRoute route;
  if (lp.dedup.identity()) {
    route = owner_route(lp.plan, options.token_owner, rank);
  } else {
    // Each distinct row once to every rank owning one of its uses.
    UseConsumers uses;
    uses.source = lp.dedup.token_source;
    uses.first = options.token_owner;
    uses.last = options.token_owner;
    for (int64_t& o : uses.last) {
      ++o;
    }
    route = route_uses(lp.plan, uses, rank);
  }
  const auto device = send.device();
  GatherOptions gopts;
  gopts.timeout = options.timeout;
  at::Tensor out = all_to_all_rows(
      send.index_select(0, at::tensor(route.send_order, at::kLong).to(device)),
      route.send_counts,
      route.recv_counts,
      group,
      gopts);
  out = out.index_select(0, at::tensor(route.recv_order, at::kLong).to(device));
  const int64_t row_bytes =
      internal::row_bytes(lp.out.widths, send.scalar_type());
  res.bytes_sent = (lp.out.fused.size(0) - route.send_counts[rank]) * row_bytes;
  const int64_t received = std::accumulate(
      route.recv_counts.begin(), route.recv_counts.end(), int64_t{0});
  res.bytes_received = (received - route.recv_counts[rank]) * row_bytes;
  res.tokens = route.tokens;
  return out;
}

/// After the consensus: the gather or the all-to-all to the owners
/// (sharded path), or the outputs as they are (replicated path).
EncodeResult finish(
    LocalPhase lp,
    const ProcessGroupPtr& group,
    int rank,
    bool any_requires_grad,
    const EncodeOptions& options) {
  EncodeResult res;
  const bool owner_mode = !options.token_owner.empty();
  if (!lp.plan.sharded()) {
    internal::expand_uses(lp.dedup, lp.out.outputs);
    if (owner_mode) {
      // This rank's rows, selected locally.
      res.tokens = internal::owned_rows(options.token_owner, rank);
      internal::select_rows(lp.out.outputs, res.tokens);
    }
    res.outputs = std::move(lp.out.outputs);
    res.plan = std::move(lp.plan);
    res.dedup = std::move(lp.dedup);
    return res;
  }
  const at::Tensor send =
      internal::joined_for_backward(lp.out.fused, any_requires_grad);
  const int64_t row_bytes =
      internal::row_bytes(lp.out.widths, send.scalar_type());
  res.allgather_bytes_received =
      (lp.plan.frames.total_tokens - lp.plan.gather_counts[rank]) * row_bytes;
  at::Tensor full;
  internal::fault_point("gather", rank);
  if (owner_mode) {
    full = route_to_owners(lp, send, rank, group, options, res);
  } else {
    GatherOptions gopts;
    gopts.timeout = options.timeout;
    full = all_gather_rows(send, lp.plan.gather_counts, group, gopts);
    if (!lp.plan.restore_rows.empty()) {
      full = full.index_select(
          0, at::tensor(lp.plan.restore_rows, at::kLong).to(full.device()));
    }
    res.bytes_sent =
        gather_traffic(lp.plan.gather_counts, rank, row_bytes).unpadded_bytes;
    res.bytes_received = res.allgather_bytes_received;
  }
  res.outputs = internal::split_widths(full, lp.out.widths);
  if (!owner_mode) {
    internal::expand_uses(
        lp.dedup, res.outputs);  // the owner route expanded already
  }
  res.plan = std::move(lp.plan);
  res.dedup = std::move(lp.dedup);
  return res;
}

}  // namespace

TowerInput local_tower_input(
    const ShardPlan& plan, int64_t rank, const at::Tensor& pixel_values) {
  const RankShard& shard = plan.ranks.at(static_cast<size_t>(rank));
  std::vector<at::Tensor> real;
  for (const auto& r : shard.pixel_ranges) {
    real.push_back(pixel_values.narrow(0, r.begin, r.size()));
  }
  return internal::shard_tower_input(shard, real, pixel_values);
}

EncodeResult encode(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const EncodeOptions& options) {
  FRAMESHARD_TORCH_CHECK(group, "encode", "expected a process group, got null");
  const int rank = group->getRank();
  const int world = group->getSize();
  const std::string prefix = internal::rank_prefix(kEncodeFn, group);
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
        tower, pixel_values, grid_thw, group, options, prefix, nullptr, stage);
    return finish(std::move(lp), group, rank, false, options);
  }

  internal::ConsensusRecord mine;
  mine.grad_mode = at::GradMode::is_enabled();
  auto exchange = std::make_shared<internal::PieceExchangeState>();
  exchange->declared = options.tower_exchanges;
  try {
    TORCH_CHECK(
        options.tower_exchanges >= 0,
        prefix,
        "expected tower_exchanges >= 0, got ",
        options.tower_exchanges);
    lp = run_local_phase(
        tower, pixel_values, grid_thw, group, options, prefix, exchange, stage);
    const std::string after = stage;
    stage = "while running the tower";  // its exchanges are the tower's
    check_exchanges(*exchange, prefix);
    stage = after;
    mine.fingerprint = lp.plan.fingerprint ^
                       internal::owner_fingerprint(options.token_owner) ^
                       (lp.dedup.fingerprint * 0x9e3779b97f4a7c15ULL);
    mine.has_grid = true;
    mine.grid = lp.dedup.units > 0 ? lp.grid : lp.plan.frames.grid;
    internal::describe_outputs(lp.out, lp.plan.sharded(), mine);
  } catch (...) {
    if (exchange->raised) {
      throw;  // every rank raised it already, inside the tower's exchange
    }
    if (exchange->play_along) {
      exchange->play_along();  // its peers' remaining exchanges, then here
    }
    mine.ok = false;
    mine.error =
        stage + ": " + detail::exception_text(std::current_exception());
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
  internal::fault_point("consensus", rank);
  const auto records = internal::run_consensus(
      group, mine, expected_rows, device, options.timeout, kEncodeFn);

  return finish(
      std::move(lp),
      group,
      rank,
      internal::any_requires_grad(records),
      options);
}

}  // namespace frameshard
