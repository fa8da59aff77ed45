// The unpadded variable-size all-gather and its reduce-scatter-v backward,
// both built on the variable-size all-to-all with split sizes (c10d's
// alltoall_base op: Gloo's only variable-size collective; on NCCL a single,
// unpadded call too; see runtime/c10d_compat.h for its name by version).
//
// The payload travels as raw bytes (internal::as_byte_rows): the collective
// only moves data, so any dtype works (bfloat16, bool, complex) whether or
// not the backend has a kernel for it, and trailing dims are flattened.

#include <frameshard/runtime/gather.h>

#include "runtime/collectives.h"
#include "tower/check.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <utility>

namespace frameshard {

namespace {

constexpr const char* kGatherFn = "all_gather_rows";

/// Forward payload: each rank sends its rows once to every rank (itself
/// included, a local copy) and receives counts[q] rows from rank q.
at::Tensor gather_rows(
    const at::Tensor& local,
    const ProcessGroupPtr& group,
    const std::vector<int64_t>& counts,
    std::chrono::milliseconds timeout) {
  const int64_t world = group->getSize();
  return internal::alltoall_tensor_rows(
      at::cat(std::vector<at::Tensor>(world, local), 0),
      group,
      std::vector<int64_t>(world, local.size(0)),
      counts,
      timeout,
      kGatherFn);
}

/// Backward payload: rank q sends the slice of its output gradient that
/// belongs to rank r to rank r; each rank sums what it receives (a
/// reduce-scatter-v, SUM, no scaling).
at::Tensor reduce_scatter_rows(
    const at::Tensor& grad,
    const ProcessGroupPtr& group,
    const std::vector<int64_t>& counts,
    std::chrono::milliseconds timeout) {
  const int64_t world = group->getSize();
  const int64_t rows = counts[group->getRank()];
  std::vector<int64_t> sizes{world, rows};
  auto trailing = grad.sizes().slice(1);
  sizes.insert(sizes.end(), trailing.begin(), trailing.end());
  return internal::alltoall_tensor_rows(
             grad,
             group,
             counts,
             std::vector<int64_t>(world, rows),
             timeout,
             kGatherFn)
      .reshape(sizes)
      .sum(0);
}

struct AllGatherRowsFunction
    : public torch::autograd::Function<AllGatherRowsFunction> {
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& local,
      const ProcessGroupPtr& group,
      const std::vector<int64_t>& counts,
      int64_t timeout_ms) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(group);
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["timeout_ms"] = timeout_ms;
    return gather_rows(
        local, group, counts, std::chrono::milliseconds(timeout_ms));
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    auto group = internal::group_from_ivalue(ctx->saved_data["group"]);
    auto counts = ctx->saved_data["counts"].toIntVector();
    const auto timeout =
        std::chrono::milliseconds(ctx->saved_data["timeout_ms"].toInt());
    // grads[0] is materialized (zeros) when the output was unused, so every
    // rank whose graph reaches this node takes part in the collective.
    at::Tensor g = reduce_scatter_rows(grads[0], group, counts, timeout);
    return {g, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_gather_rows(
    const at::Tensor& local,
    const std::vector<int64_t>& counts,
    const ProcessGroupPtr& group,
    const GatherOptions& options) {
  FRAMESHARD_TORCH_CHECK(
      group, "all_gather_rows", "expected a process group, got null");
  const std::string prefix = internal::rank_prefix(kGatherFn, group);
  const int world = group->getSize();
  const int rank = group->getRank();
  TORCH_CHECK(local.defined(), prefix, "expected a defined tensor, got none");
  TORCH_CHECK(
      local.dim() >= 1,
      prefix,
      "expected a tensor with at least 1 dim, got ",
      local.dim(),
      " dims");
  if (!counts.empty()) {
    internal::check_counts(counts, "counts", world, prefix);
  }
  TORCH_CHECK(
      counts.empty() || counts[rank] == local.size(0),
      prefix,
      "expected local rows == counts[",
      rank,
      "] (",
      counts.empty() ? 0 : counts[rank],
      "), got ",
      local.size(0));
  if (world == 1) {
    return local;
  }

  std::vector<int64_t> all_counts = counts;
  if (all_counts.empty()) {
    at::Tensor mine =
        at::full({1}, local.size(0), local.options().dtype(at::kLong));
    auto gathered =
        internal::allgather_equal(group, mine, options.timeout, kGatherFn);
    for (const auto& c : gathered) {
      all_counts.push_back(c.cpu().item<int64_t>());
    }
  }
  return AllGatherRowsFunction::apply(
      local, group, all_counts, static_cast<int64_t>(options.timeout.count()));
}

GatherTraffic gather_traffic(
    const std::vector<int64_t>& counts, int64_t rank, int64_t row_bytes) {
  const auto world = static_cast<int64_t>(counts.size());
  FRAMESHARD_TORCH_CHECK(
      rank >= 0 && rank < world,
      "gather_traffic",
      "expected rank in [0, ",
      world,
      "), got ",
      rank);
  FRAMESHARD_TORCH_CHECK(
      row_bytes >= 0,
      "gather_traffic",
      "expected row_bytes >= 0, got ",
      row_bytes);
  int64_t largest = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    FRAMESHARD_TORCH_CHECK(
        counts[r] >= 0,
        "gather_traffic",
        "expected counts[",
        r,
        "] >= 0, got ",
        counts[r]);
    largest = std::max(largest, counts[r]);
  }
  GatherTraffic t;
  t.unpadded_bytes = counts[rank] * row_bytes * (world - 1);
  t.padded_bytes = largest * row_bytes * (world - 1);
  return t;
}

}  // namespace frameshard
