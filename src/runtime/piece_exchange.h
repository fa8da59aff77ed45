// !!! Internal header of frameshard::runtime, not installed. !!!
// The PieceExchange of a split plan (frameshard/tower.h PieceExchange),
// built by encode (and encode_mesh, over the mesh group) for the tower. Per
// call (once per full-attention layer):
//   1. one consensus-record all-gather (runtime/consensus.h, the record
//      encode's own consensus sends): a rank whose tower raised joins
//      encode's consensus instead, its peers meet that record here, and
//      every rank raises the same error; a rank with a different plan or
//      K/V width is caught before any payload moves;
//   2. one all-to-all (frameshard/runtime/route.h) moving each piece's rows
//      to the other ranks holding pieces of its frame, and nothing else.
// When the tower declares its exchanges per call (EncodeOptions::
// tower_exchanges), only the first runs step 1: a rank whose tower fails
// after it sends zeros through the rest (PieceExchangeState::play_along),
// so that every rank reaches encode's consensus, where the failure is
// agreed on. A consensus per layer is a collective and, on CUDA, a host
// sync per full-attention layer; on this repository's 2-core CPU it was
// 4 % of a split call of the Qwen3-VL benchmark tower.
// Defined in src/runtime/piece_exchange.cpp.
#pragma once

#include <frameshard/plan.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/tower.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace frameshard {
namespace internal {

/// Where the rows of one rank's exchange go and come from (pure function of
/// the plan; every rank computes every other rank's counts alike).
struct PieceRoute {
  /// Rows sent to / received from each rank (all-to-all counts).
  std::vector<int64_t> send_counts;
  std::vector<int64_t> recv_counts;
  /// Local row of every sent row, grouped by destination rank.
  std::vector<int64_t> send_rows;
  /// Per local piece, the whole frame as parts in rank order: rows
  /// [offset, offset + rows) of the local rows (source == -1) or of the
  /// received rows.
  struct Part {
    int64_t source = -1;
    int64_t offset = 0;
    int64_t rows = 0;
  };
  std::vector<std::vector<Part>> parts;
  /// Rows every rank sends in total (what the consensus record checks).
  std::vector<int64_t> sent_by_rank;
};

PieceRoute piece_route(const ShardPlan& plan, int64_t rank);

/// Shared between encode and its exchange.
struct PieceExchangeState {
  /// Set when a collective of the exchange raised (a peer's failure agreed
  /// on, a disagreement, or the collective itself failing): encode then
  /// rethrows instead of running its own consensus, which no peer joins.
  bool raised = false;
  int64_t calls = 0;
  /// EncodeOptions::tower_exchanges (0: every exchange runs a consensus).
  int64_t declared = 0;
  /// Set by the first exchange, for the later ones and play_along: whether
  /// any rank needs a gradient, and the rows' width and options.
  bool any_grad = false;
  int64_t width = 0;
  at::TensorOptions options;
  /// Sends zeros through the exchanges this rank's tower did not make
  /// (declared - calls, after at least one), so that its peers, which make
  /// them, reach encode's consensus and its failure there. Set by
  /// make_piece_exchange.
  std::function<void()> play_along;
};

/// The collective exchange of rank `rank` of `plan` over `group`; its
/// errors name `fn` (the call whose tower runs it: "encode",
/// "encode_mesh"; a string literal).
PieceExchange make_piece_exchange(
    const ShardPlan& plan,
    int64_t rank,
    const ProcessGroupPtr& group,
    c10::Device device,
    std::chrono::milliseconds timeout,
    std::shared_ptr<PieceExchangeState> state,
    const char* fn = "encode");

}  // namespace internal
}  // namespace frameshard
