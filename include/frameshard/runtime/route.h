// File: frameshard/runtime/route.h
//
// The differentiable variable-size all-to-all along dim 0: what owner-routed
// visual embeddings travel on (frameshard/owner_route.h).
//
// Semantics:
//   forward   rank r holds `local` whose rows are grouped by destination:
//             the first send_counts[0] rows go to rank 0, the next
//             send_counts[1] to rank 1, ...; it returns the rows it
//             receives, recv_counts[q] from rank q, concatenated in rank
//             order. No padding goes on the wire.
//   backward  the transposed all-to-all: each gradient row goes back to
//             the rank that sent the row, into the position it came from.
//             Nothing is summed: a row sent once has exactly one receiver,
//             so exactly one rank holds its gradient (unlike the
//             all-gather, whose every row is used on every rank and whose
//             backward must sum).
//   World size 1 returns `local` unchanged.
//
// Usage:
//   frameshard::OwnerRoute r = frameshard::owner_route(plan, owner, rank);
//   at::Tensor mine = frameshard::all_to_all_rows(
//       local.index_select(0, send_order), r.send_counts, r.recv_counts, pg);
//
// Collective: every rank of `group` must call it, with counts that match
// (recv_counts[q] on rank r == send_counts[r] on rank q); it trusts them.
#pragma once

#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/process_group.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace frameshard {

/// See the banner. Checks the local sizes (counts per rank, non-negative,
/// local rows == sum of send_counts) before any payload moves.
at::Tensor all_to_all_rows(
    const at::Tensor& local,
    const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& recv_counts,
    const ProcessGroupPtr& group,
    const GatherOptions& options = {});

}  // namespace frameshard
