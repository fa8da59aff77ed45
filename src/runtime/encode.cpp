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

#include <frameshard/runtime/encode.h>

#include <frameshard/owner_route.h>
#include <frameshard/runtime/route.h>

#include "core/fingerprint.h"
#include "runtime/collectives.h"
#include "runtime/consensus.h"
#include "runtime/fault.h"
#include "runtime/piece_exchange.h"
#include "tower/check.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

namespace frameshard {

// ---------------------------------------------------------------- encode
namespace {

constexpr const char* kEncodeFn = "encode";

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

/// Local check of token_owner against the plan (before the consensus, so
/// that a bad map on one rank raises on all).
void check_token_owner(
    const EncodeOptions& options,
    const ShardPlan& plan,
    int world,
    const std::string& prefix) {
  if (options.token_owner.empty()) {
    return;
  }
  TORCH_CHECK(
      static_cast<int64_t>(options.token_owner.size()) ==
          plan.frames.total_tokens,
      prefix,
      "expected token_owner to have one entry per visual token (",
      plan.frames.total_tokens,
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

/// What the ranks must agree on besides the plan: the owner map.
uint64_t owner_fingerprint(const std::vector<int64_t>& owner) {
  if (owner.empty()) {
    return 0;
  }
  internal::Fingerprint fp;
  fp.add(static_cast<int64_t>(owner.size()));
  for (int64_t o : owner) {
    fp.add(o);
  }
  return fp.finish();
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
      pixel_values.defined() ? shape_text(pixel_values)
                             : "an undefined tensor");
  TORCH_CHECK(
      static_cast<bool>(tower),
      prefix,
      "expected a callable tower, got an empty function");
  lp.plan = make_plan(grid_from_tensor(grid_thw), options.plan);
  check_pixel_rows(lp.plan.frames, pixel_values.size(0));
  check_token_owner(options, lp.plan, options.plan.world, prefix);
  const c10::Device device = pixel_values.device();

  TowerInput in;
  int64_t expected_rows = 0;
  const char* rows_meaning = "";
  if (lp.plan.sharded()) {
    stage = "while slicing its pixel rows";
    in = local_tower_input(lp.plan, rank, pixel_values);
    if (lp.plan.split && group->getSize() > 1) {
      in.exchange = internal::make_piece_exchange(
          lp.plan, rank, group, device, options.timeout, exchange);
    }
    expected_rows = lp.plan.ranks.at(rank).local_tokens;
    rows_meaning = "local_tokens of the plan: real, floor and dummy frames";
  } else {
    in.pixel_values = pixel_values;
    in.grid_thw = grid_thw.to(device, at::kLong);
    in.cu_seqlens = frame_cu_seqlens(lp.plan.frames.grid, device);
    expected_rows = lp.plan.frames.total_tokens;
    rows_meaning = "the merged tokens of all frames";
  }

  stage = "while running the tower";
  internal::fault_point("tower", rank);
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

/// Splits fused [rows, sum(widths)] back into one tensor per output.
std::vector<at::Tensor> split_widths(
    const at::Tensor& fused, const std::vector<int64_t>& widths) {
  std::vector<at::Tensor> outs;
  int64_t offset = 0;
  for (int64_t w : widths) {
    outs.push_back(widths.size() == 1 ? fused : fused.narrow(1, offset, w));
    offset += w;
  }
  return outs;
}

int64_t row_bytes_of(const LocalPhase& lp, at::ScalarType dtype) {
  const int64_t width =
      std::accumulate(lp.widths.begin(), lp.widths.end(), int64_t{0});
  return width * static_cast<int64_t>(c10::elementSize(dtype));
}

/// Owner mode on the replicated path: this rank's rows, selected locally.
void select_owned(
    LocalPhase& lp, int rank, const EncodeOptions& options, EncodeResult& res) {
  for (size_t t = 0; t < options.token_owner.size(); ++t) {
    if (options.token_owner[t] == rank) {
      res.tokens.push_back(static_cast<int64_t>(t));
    }
  }
  if (lp.outputs.empty()) {
    return;
  }
  at::Tensor idx = at::tensor(res.tokens, at::kLong).to(lp.outputs[0].device());
  for (auto& o : lp.outputs) {
    o = o.index_select(0, idx);
  }
}

/// Owner mode on the sharded path: one all-to-all to the owners.
at::Tensor route_to_owners(
    const LocalPhase& lp,
    const at::Tensor& send,
    int rank,
    const ProcessGroupPtr& group,
    const EncodeOptions& options,
    EncodeResult& res) {
  const OwnerRoute route = owner_route(lp.plan, options.token_owner, rank);
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
  const int64_t row_bytes = row_bytes_of(lp, send.scalar_type());
  res.bytes_sent = (lp.fused.size(0) - route.send_counts[rank]) * row_bytes;
  res.bytes_received =
      (static_cast<int64_t>(route.tokens.size()) - route.recv_counts[rank]) *
      row_bytes;
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
    if (owner_mode) {
      select_owned(lp, rank, options, res);
    }
    res.outputs = std::move(lp.outputs);
    res.plan = std::move(lp.plan);
    return res;
  }
  at::Tensor send = lp.fused;
  if (any_requires_grad && !send.requires_grad()) {
    // Another rank will run backward through the collective, which needs
    // every rank: a fresh leaf makes this rank's part of the graph too
    // (Megatron-Bridge #4784: 0-image ranks hung). Its gradient is
    // discarded.
    send = send.detach().requires_grad_();
  }
  const int64_t row_bytes = row_bytes_of(lp, send.scalar_type());
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
  res.outputs = split_widths(full, lp.widths);
  res.plan = std::move(lp.plan);
  return res;
}

}  // namespace

TowerInput local_tower_input(
    const ShardPlan& plan, int64_t rank, const at::Tensor& pixel_values) {
  const RankShard& shard = plan.ranks.at(static_cast<size_t>(rank));
  const c10::Device device = pixel_values.device();
  std::vector<at::Tensor> pieces;
  for (const auto& r : shard.pixel_ranges) {
    pieces.push_back(pixel_values.narrow(0, r.begin, r.size()));
  }
  const int64_t zero_rows = shard.local_patch_rows - shard.real_patch_rows;
  if (zero_rows > 0) {
    // Floor and dummy frames: zeros, never merged with real media; their
    // output rows are dropped before the gather.
    pieces.push_back(
        at::zeros({zero_rows, pixel_values.size(1)}, pixel_values.options()));
  }
  TowerInput in;
  in.pixel_values = pieces.empty()       ? pixel_values.narrow(0, 0, 0)
                    : pieces.size() == 1 ? pieces[0]
                                         : at::cat(pieces, 0);
  in.grid_thw = grid_to_tensor(shard.grid, device);
  in.cu_seqlens = cu_seqlens_tensor(shard.cu_seqlens, device);
  in.pieces = shard.pieces;
  return in;
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
  try {
    lp = run_local_phase(
        tower, pixel_values, grid_thw, group, options, prefix, exchange, stage);
    mine.fingerprint =
        lp.plan.fingerprint ^ owner_fingerprint(options.token_owner);
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
    if (exchange->raised) {
      throw;  // every rank raised it already, inside the tower's exchange
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

  const bool any_requires_grad = std::any_of(
      records.begin(), records.end(), [](const internal::ConsensusRecord& r) {
        return r.requires_grad;
      });
  return finish(std::move(lp), group, rank, any_requires_grad, options);
}

}  // namespace frameshard
