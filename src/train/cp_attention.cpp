// Load-balanced CP split and causal attention over all-gathered K/V.
#include <frameshard/train/cp_attention.h>

#include <frameshard/error.h>
#include <frameshard/owner_route.h>
#include <frameshard/runtime/gather.h>

#include "tower/check.h"

#include <ATen/ATen.h>

namespace frameshard {
namespace train {

std::vector<int64_t> cp_local_positions(
    int64_t seq_len, int64_t cp_size, int64_t cp_rank) {
  FRAMESHARD_CHECK(
      cp_size >= 1 && cp_rank >= 0 && cp_rank < cp_size,
      "cp_local_positions",
      "expected 0 <= cp_rank < cp_size, got cp_rank ",
      cp_rank,
      ", cp_size ",
      cp_size);
  FRAMESHARD_CHECK(
      seq_len > 0 && seq_len % (2 * cp_size) == 0,
      "cp_local_positions",
      "expected a sequence length that is a positive multiple of 2 * cp_size "
      "= ",
      2 * cp_size,
      ", got ",
      seq_len);
  // The sequence is already padded (the checks above), so the core's split
  // (which pads) returns exactly the positions of this length.
  return sequence_chunk_positions(
      seq_len, cp_size, cp_rank, SequenceSplit::kLoadBalanced);
}

at::Tensor cp_causal_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& positions,
    int64_t seq_len,
    const ProcessGroupPtr& group) {
  FRAMESHARD_TORCH_CHECK(
      q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
      "cp_causal_attention",
      "expected q, k, v of one shape [heads, local_len, head_dim], got ",
      q.sizes(),
      ", ",
      k.sizes(),
      ", ",
      v.sizes());
  FRAMESHARD_TORCH_CHECK(
      positions.dim() == 1 && positions.size(0) == q.size(1),
      "cp_causal_attention",
      "expected ",
      q.size(1),
      " positions, got shape ",
      positions.sizes());
  const int64_t cp = group ? group->getSize() : 1;
  at::Tensor k_all = k;
  at::Tensor v_all = v;
  at::Tensor key_pos = positions;
  if (cp > 1) {
    const int64_t heads = q.size(0);
    const int64_t local = q.size(1);
    const int64_t dim = q.size(2);
    // One collective for K and V: rows are positions, features [k | v].
    at::Tensor kv =
        at::cat({k, v}, 2).transpose(0, 1).reshape({local, 2 * heads * dim});
    at::Tensor all = all_gather_rows(
        kv, std::vector<int64_t>(static_cast<size_t>(cp), local), group);
    all = all.reshape({cp * local, heads, 2 * dim}).transpose(0, 1);
    k_all = all.narrow(2, 0, dim);
    v_all = all.narrow(2, dim, dim);
    // The gathered rows are in rank order; their global positions:
    std::vector<int64_t> kp;
    kp.reserve(static_cast<size_t>(cp * local));
    for (int64_t r = 0; r < cp; ++r) {
      for (int64_t p : cp_local_positions(seq_len, cp, r)) {
        kp.push_back(p);
      }
    }
    key_pos = at::tensor(kp, positions.options());
  }
  // True where query position >= key position (SDPA: True = attend).
  at::Tensor mask = positions.unsqueeze(1) >= key_pos.unsqueeze(0);
  return at::scaled_dot_product_attention(q, k_all, v_all, mask);
}

}  // namespace train
}  // namespace frameshard
