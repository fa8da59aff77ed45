// The differentiable all-to-all-v (frameshard/runtime/route.h), on the same
// byte-row alltoall_base as the gather.
#include <frameshard/runtime/route.h>

#include "runtime/collectives.h"
#include "tower/check.h"

#include <torch/csrc/autograd/custom_function.h>

#include <numeric>
#include <string>

namespace frameshard {
namespace {

constexpr const char* kRouteFn = "all_to_all_rows";

struct AllToAllRowsFunction
    : public torch::autograd::Function<AllToAllRowsFunction> {
  static at::Tensor forward(
      torch::autograd::AutogradContext* ctx,
      const at::Tensor& local,
      const ProcessGroupPtr& group,
      const std::vector<int64_t>& send_counts,
      const std::vector<int64_t>& recv_counts,
      int64_t timeout_ms) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(group);
    ctx->saved_data["send"] = send_counts;
    ctx->saved_data["recv"] = recv_counts;
    ctx->saved_data["timeout_ms"] = timeout_ms;
    return internal::alltoall_tensor_rows(
        local,
        group,
        send_counts,
        recv_counts,
        std::chrono::milliseconds(timeout_ms),
        kRouteFn);
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    auto group = internal::group_from_ivalue(ctx->saved_data["group"]);
    const auto send = ctx->saved_data["send"].toIntVector();
    const auto recv = ctx->saved_data["recv"].toIntVector();
    const auto timeout =
        std::chrono::milliseconds(ctx->saved_data["timeout_ms"].toInt());
    // The transpose: what was received goes back where it came from.
    at::Tensor g = internal::alltoall_tensor_rows(
        grads[0], group, recv, send, timeout, kRouteFn);
    return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all_rows(
    const at::Tensor& local,
    const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& recv_counts,
    const ProcessGroupPtr& group,
    const GatherOptions& options) {
  FRAMESHARD_TORCH_CHECK(
      group, "all_to_all_rows", "expected a process group, got null");
  const std::string prefix = internal::rank_prefix(kRouteFn, group);
  const int world = group->getSize();
  TORCH_CHECK(
      local.defined() && local.dim() >= 1,
      prefix,
      "expected a defined tensor with at least 1 dim, got ",
      local.defined() ? std::to_string(local.dim()) + " dims" : "none");
  internal::check_counts(send_counts, "send_counts", world, prefix);
  internal::check_counts(recv_counts, "recv_counts", world, prefix);
  const int64_t sent =
      std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  TORCH_CHECK(
      sent == local.size(0),
      prefix,
      "expected local rows == sum(send_counts) (",
      sent,
      "), got ",
      local.size(0));
  if (world == 1) {
    return local;
  }
  return AllToAllRowsFunction::apply(
      local,
      group,
      send_counts,
      recv_counts,
      static_cast<int64_t>(options.timeout.count()));
}

}  // namespace frameshard
