// The collective exchange of split frames (runtime/piece_exchange.h): the
// routing from the plan, the consensus record before the payload, one
// all-to-all, and a tie that keeps the all-to-all in every rank's graph.
#include "runtime/piece_exchange.h"

#include <frameshard/runtime/route.h>

#include "runtime/collectives.h"
#include "runtime/consensus.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <map>
#include <utility>

namespace frameshard {
namespace internal {

namespace {

// One piece of a split frame as the plan lays it out.
struct Holder {
  int64_t rank = 0;
  int64_t rows = 0;
  int64_t offset = 0;  // first local row of the piece on its rank
};

int64_t unit_of(const RankShard& rs, const FramePiece& p) {
  return rs.units.at(static_cast<size_t>(p.frame));
}

// Every split unit's pieces, in rank order.
std::map<int64_t, std::vector<Holder>> holders_of(const ShardPlan& plan) {
  std::map<int64_t, std::vector<Holder>> out;
  for (const RankShard& rs : plan.ranks) {
    for (const FramePiece& p : rs.pieces) {
      out[unit_of(rs, p)].push_back(Holder{
          rs.rank, p.rows(), rs.cu_seqlens.at(static_cast<size_t>(p.frame))});
    }
  }
  return out;
}

// Forward: x as it is. Backward: x's gradient, and an undefined one for
// `anchor`: the engine still runs the node that made `anchor` (the
// all-to-all, whose backward is collective) on every rank, also on one where
// nothing else uses its output, and materializes zeros for it there. Zeros
// made here would be allocated and added to the received rows' gradient on
// every rank with pieces, once per layer.
struct TieFunction : public torch::autograd::Function<TieFunction> {
  static at::Tensor forward(
      torch::autograd::AutogradContext* /*ctx*/,
      const at::Tensor& x,
      const at::Tensor& /*anchor*/) {
    return x;
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* /*ctx*/,
      torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

PieceRoute piece_route(const ShardPlan& plan, int64_t rank) {
  const auto world = static_cast<int64_t>(plan.ranks.size());
  const auto holders = holders_of(plan);
  PieceRoute route;
  route.send_counts.assign(static_cast<size_t>(world), 0);
  route.recv_counts.assign(static_cast<size_t>(world), 0);
  route.sent_by_rank.assign(static_cast<size_t>(world), 0);
  for (const auto& [unit, hs] : holders) {
    for (const Holder& h : hs) {
      route.sent_by_rank[static_cast<size_t>(h.rank)] +=
          h.rows * static_cast<int64_t>(hs.size() - 1);
    }
  }
  const RankShard& mine = plan.ranks.at(static_cast<size_t>(rank));
  // The split units of this rank, ascending (its pieces are in local
  // order, and a contiguous plan's local order is unit order).
  std::vector<const std::vector<Holder>*> frames;
  for (const FramePiece& p : mine.pieces) {
    frames.push_back(&holders.at(unit_of(mine, p)));
  }
  auto find = [](const std::vector<Holder>& hs, int64_t r) {
    return std::find_if(
        hs.begin(), hs.end(), [r](const Holder& h) { return h.rank == r; });
  };
  // Send: to every other holder of each of its frames, rank by rank.
  for (int64_t d = 0; d < world; ++d) {
    for (const auto* hs : frames) {
      if (d == rank || find(*hs, d) == hs->end()) {
        continue;
      }
      const Holder& me = *find(*hs, rank);
      for (int64_t r = 0; r < me.rows; ++r) {
        route.send_rows.push_back(me.offset + r);
      }
      route.send_counts[static_cast<size_t>(d)] += me.rows;
    }
  }
  // Receive: from every other holder, in the same (source, frame) order;
  // then each frame's parts in rank order.
  std::map<std::pair<int64_t, size_t>, int64_t> at_offset;
  int64_t received = 0;
  for (int64_t s = 0; s < world; ++s) {
    for (size_t j = 0; j < frames.size(); ++j) {
      const auto it = find(*frames[j], s);
      if (s == rank || it == frames[j]->end()) {
        continue;
      }
      at_offset[{s, j}] = received;
      received += it->rows;
      route.recv_counts[static_cast<size_t>(s)] += it->rows;
    }
  }
  for (size_t j = 0; j < frames.size(); ++j) {
    std::vector<PieceRoute::Part> parts;
    for (const Holder& h : *frames[j]) {
      parts.push_back(
          h.rank == rank
              ? PieceRoute::Part{-1, h.offset, h.rows}
              : PieceRoute::Part{h.rank, at_offset[{h.rank, j}], h.rows});
    }
    route.parts.push_back(std::move(parts));
  }
  return route;
}

namespace {

// The first exchange of a call (every exchange when none are declared): the
// consensus record before any payload moves. Returns whether any rank
// needs a gradient.
bool exchange_consensus(
    const PieceRoute& route,
    uint64_t fingerprint,
    int64_t declared,
    const std::vector<GridThw>& grid,
    int64_t rank,
    const at::Tensor& rows,
    const ProcessGroupPtr& group,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn) {
  ConsensusRecord mine;
  // Ranks that declared different exchange counts would part after this
  // one (one runs a consensus per exchange, another does not): that
  // disagrees here, as a plan.
  mine.fingerprint =
      fingerprint ^ (static_cast<uint64_t>(declared) * 0x9e3779b97f4a7c15ULL);
  mine.has_grid = true;
  mine.grid = grid;
  mine.path = 0;
  mine.rows = route.sent_by_rank[static_cast<size_t>(rank)];
  mine.dtype = static_cast<int64_t>(rows.scalar_type());
  mine.widths = {rows.size(1)};
  mine.grad_mode = at::GradMode::is_enabled();
  mine.requires_grad = mine.grad_mode && rows.requires_grad();
  const auto records =
      run_consensus(group, mine, route.sent_by_rank, device, timeout, fn);
  return std::any_of(
      records.begin(), records.end(), [](const ConsensusRecord& r) {
        return r.requires_grad;
      });
}

// The parts of `rows` (the local rows, or the received ones) that the
// pieces' whole frames take, by their first row: one split_with_sizes, not
// a narrow per part. A narrow's backward zero-fills a tensor of all the
// rows and adds it to the gradient, once per part and layer; the split's is
// one cat (zeros only for the rows no piece takes).
std::map<int64_t, at::Tensor> segments_of(
    const PieceRoute& route, const at::Tensor& rows, bool received) {
  std::map<int64_t, int64_t> parts;  // offset -> rows
  for (const auto& frame : route.parts) {
    for (const PieceRoute::Part& p : frame) {
      if ((p.source >= 0) == received) {
        parts.emplace(p.offset, p.rows);
      }
    }
  }
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const auto& [offset, n] : parts) {
    if (offset > at) {
      sizes.push_back(offset - at);  // rows no piece takes
    }
    sizes.push_back(n);
    at = offset + n;
  }
  if (rows.size(0) > at) {
    sizes.push_back(rows.size(0) - at);
  }
  const std::vector<at::Tensor> split = rows.split_with_sizes(sizes, 0);
  std::map<int64_t, at::Tensor> out;
  int64_t first = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (parts.count(first) != 0 && parts.at(first) == sizes[i]) {
      out.emplace(first, split[i]);
    }
    first += sizes[i];
  }
  return out;
}

// The payload of one exchange: each piece's rows to the other holders of
// its frame; then every local piece's whole frame, parts in rank order.
std::vector<at::Tensor> move_pieces(
    const PieceRoute& route,
    const at::Tensor& rows,
    bool any_grad,
    const ProcessGroupPtr& group,
    std::chrono::milliseconds timeout) {
  at::Tensor send = rows.index_select(
      0, at::tensor(route.send_rows, at::kLong).to(rows.device()));
  if (any_grad && !send.requires_grad()) {
    // Another rank runs the backward all-to-all, which needs every rank.
    send = send.detach().requires_grad_();
  }
  GatherOptions gopts;
  gopts.timeout = timeout;
  const at::Tensor recv =
      all_to_all_rows(send, route.send_counts, route.recv_counts, group, gopts);
  std::vector<at::Tensor> out{TieFunction::apply(rows, recv)};
  const auto local = segments_of(route, out[0], /*received=*/false);
  const auto received = segments_of(route, recv, /*received=*/true);
  for (const auto& parts : route.parts) {
    std::vector<at::Tensor> pieces;
    for (const PieceRoute::Part& p : parts) {
      pieces.push_back((p.source < 0 ? local : received).at(p.offset));
    }
    out.push_back(at::cat(pieces, 0));
  }
  return out;
}

}  // namespace

PieceExchange make_piece_exchange(
    const ShardPlan& plan,
    int64_t rank,
    const ProcessGroupPtr& group,
    c10::Device device,
    std::chrono::milliseconds timeout,
    std::shared_ptr<PieceExchangeState> state,
    const char* fn) {
  auto route = std::make_shared<const PieceRoute>(piece_route(plan, rank));
  const uint64_t fingerprint = plan.fingerprint;
  // A peer whose grid differs may meet this exchange in its own consensus:
  // the grid lets both name the differing row.
  auto grid = std::make_shared<const std::vector<GridThw>>(plan.frames.grid);
  // Zeros through the declared exchanges this rank's tower did not make
  // (no autograd: every rank raises at encode's consensus, before any
  // backward).
  state->play_along = [route, group, timeout, raw = state.get()] {
    if (raw->declared == 0 || raw->calls == 0) {
      return;  // before the first exchange its peers meet encode's record
    }
    at::NoGradGuard no_grad;
    const at::Tensor zeros = at::zeros(
        {static_cast<int64_t>(route->send_rows.size()), raw->width},
        raw->options);
    GatherOptions gopts;
    gopts.timeout = timeout;
    for (; raw->calls < raw->declared; ++raw->calls) {
      all_to_all_rows(
          zeros, route->send_counts, route->recv_counts, group, gopts);
    }
  };
  return [route, fingerprint, grid, rank, group, device, timeout, state, fn](
             const at::Tensor& rows) -> std::vector<at::Tensor> {
    TORCH_CHECK(
        state->declared == 0 || state->calls < state->declared,
        rank_prefix(fn, group),
        "expected the tower's declared ",
        state->declared,
        " K/V exchanges per call (tower_exchanges), got one more");
    try {
      if (state->declared == 0 || state->calls == 0) {
        state->any_grad = exchange_consensus(
            *route,
            fingerprint,
            state->declared,
            *grid,
            rank,
            rows,
            group,
            device,
            timeout,
            fn);
        state->width = rows.size(1);
        state->options = rows.options();
      }
      state->calls += 1;
      return move_pieces(*route, rows, state->any_grad, group, timeout);
    } catch (...) {
      state->raised = true;
      throw;
    }
  };
}

}  // namespace internal
}  // namespace frameshard
