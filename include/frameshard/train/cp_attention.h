// File: frameshard/train/cp_attention.h
//
// Sequence context parallelism for the decoder: the load-balanced split and
// causal attention across the CP ranks.
//
// Split: the sequence (length a multiple of 2 * cp) is cut into 2 * cp equal
// chunks and rank r holds chunks r and 2cp-1-r, so every rank gets the same
// amount of causal-attention work (early chunks attend to little, late ones
// to much; each rank pairs one of each).
//
// Attention (Llama 3 style): every rank all-gathers K and V of the whole
// sequence (one differentiable collective for both, frameshard's
// all_gather_rows: backward is the reduce-scatter that sends each rank the
// sum of the gradients of its rows) and attends its local queries to them
// with the causal mask of the global positions. Simple and exact; its memory
// is O(seq * local) per rank, which is what a small model needs.
//
// Usage:
//   auto pos = frameshard::train::cp_local_positions(seq_len, cp, rank);
//   at::Tensor o = frameshard::train::cp_causal_attention(q, k, v, pos,
//                                                         seq_len, group);
//
// Collective: cp_causal_attention, over `group` (all CP ranks call it with
// the same seq_len); nullptr or a group of one rank attends locally.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace train {

/// The global positions rank `cp_rank` holds, ascending: chunk cp_rank then
/// chunk 2cp-1-cp_rank. Throws when seq_len is not a multiple of 2 * cp.
std::vector<int64_t> cp_local_positions(
    int64_t seq_len, int64_t cp_size, int64_t cp_rank);

/// q, k, v: [heads, local_len, head_dim], rows in cp_local_positions order
/// (`positions`, int64 [local_len]). Returns [heads, local_len, head_dim].
/// Collective over `group`; see the banner.
at::Tensor cp_causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& positions,
    int64_t seq_len,
    const ProcessGroupPtr& group);

}  // namespace train
}  // namespace frameshard
