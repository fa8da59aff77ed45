// File: frameshard/runtime/gather.h
//
// The differentiable, unpadded variable-size all-gather along dim 0.
//
// Semantics (PyTorch's AllGatherIntoTensor / reduce-scatter duality, not
// MLX's slice-only backward):
//   forward   rank r holds local [counts[r], ...]; every rank returns the
//             concatenation over ranks in rank order, [sum(counts), ...].
//             No payload padding goes on the wire: Gloo and NCCL both run it
//             as alltoall_base with per-peer split sizes (each rank sends its
//             rows once to every peer).
//   backward  rank r receives the gradient of the full output on every rank
//             and returns SUM over ranks q of grad_q[rows of r] -- a
//             reduce-scatter-v with no scaling. Together with the usual
//             DP x CP gradient all-reduce of the tower's parameters this
//             equals the replicated path: a row computed on rank r gets the
//             gradient of every rank whose loss used it.
//   A rank may contribute 0 rows. World size 1 returns `local` unchanged.
//   Rows dropped after the gather (and rows never sent) get zero gradient.
//
// Usage:
//   std::vector<int64_t> counts = plan.gather_counts;
//   at::Tensor full = frameshard::all_gather_rows(local, counts, pg);
//
// Collective: every rank of `group` must call it, with the same `counts`.
// A rank whose `local` has the wrong row count raises before any payload
// moves only if the caller ran the consensus (frameshard::encode does);
// all_gather_rows itself trusts `counts`.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace frameshard {

struct GatherOptions {
  /// Per-collective timeout; 0 uses the group's default.
  std::chrono::milliseconds timeout{0};
};

/// See the banner. `counts` has group->getSize() entries; empty means "not
/// known": the counts are exchanged first (one extra small all-gather).
at::Tensor all_gather_rows(
    const at::Tensor& local,
    const std::vector<int64_t>& counts,
    const ProcessGroupPtr& group,
    const GatherOptions& options = {});

/// Bytes one rank puts on the wire for a gather of `counts` rows of
/// `row_bytes` each (sends to peers only), unpadded and padded to the
/// largest count (what an equal-size all_gather would send).
struct GatherTraffic {
  int64_t unpadded_bytes = 0;
  int64_t padded_bytes = 0;
};
GatherTraffic gather_traffic(
    const std::vector<int64_t>& counts, int64_t rank, int64_t row_bytes);

}  // namespace frameshard
