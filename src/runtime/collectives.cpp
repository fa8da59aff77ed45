// Thin blocking wrappers over the c10d collectives the runtime uses
// (runtime/collectives.h): one place for timeouts and error wording.

#include "runtime/collectives.h"

#include "runtime/c10d_compat.h"

#include <frameshard/error.h>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <numeric>
#include <string>

namespace frameshard {
namespace internal {

std::string rank_prefix(const char* fn, const ProcessGroupPtr& group) {
  return ::frameshard::detail::error_prefix(
      fn, group->getRank(), group->getSize());
}

namespace {

c10::intrusive_ptr<c10d::Work> checked_call(
    const ProcessGroupPtr& group,
    const char* fn,
    const char* what,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& call) {
  std::string error;
  try {
    return call();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  TORCH_CHECK(false, rank_prefix(fn, group), what, " could not start: ", error);
  return {};
}

void wait_for(
    const c10::intrusive_ptr<c10d::Work>& work,
    const ProcessGroupPtr& group,
    std::chrono::milliseconds timeout,
    const char* fn,
    const char* what) {
  // Why both: Gloo bounds every transfer by the group's timeout; a shorter
  // per-call timeout also bounds the wait here (the transfer itself then
  // finishes or fails in Gloo's worker within the group timeout).
  const char* hint =
      " failed (a peer exited, raised before the collective, called a "
      "different collective, or did not arrive within the timeout): ";
  try {
    if (timeout.count() > 0) {
      work->wait(timeout);
    } else {
      work->wait();
    }
  } catch (const c10::Error& e) {
    TORCH_CHECK(
        false, rank_prefix(fn, group), what, hint, e.what_without_backtrace());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, rank_prefix(fn, group), what, hint, e.what());
  }
}

std::chrono::milliseconds option_timeout(std::chrono::milliseconds t) {
  return t.count() > 0 ? t : c10d::kUnsetTimeout;
}

}  // namespace

void alltoall_rows(
    const ProcessGroupPtr& group,
    at::Tensor& output,
    at::Tensor& input,
    const std::vector<int64_t>& output_splits,
    const std::vector<int64_t>& input_splits,
    std::chrono::milliseconds timeout,
    const char* fn) {
  c10d::AllToAllOptions opts;
  opts.timeout = option_timeout(timeout);
  // alltoall_base takes non-const references to its split vectors.
  std::vector<int64_t> out_splits = output_splits;
  std::vector<int64_t> in_splits = input_splits;
  auto work = checked_call(group, fn, "alltoall_base", [&] {
    return all_to_all_single(group, output, input, out_splits, in_splits, opts);
  });
  wait_for(work, group, timeout, fn, "alltoall_base");
}

std::vector<at::Tensor> allgather_equal(
    const ProcessGroupPtr& group,
    const at::Tensor& input,
    std::chrono::milliseconds timeout,
    const char* fn) {
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < group->getSize(); ++r) {
    outputs[0].push_back(at::empty_like(input, at::MemoryFormat::Contiguous));
  }
  std::vector<at::Tensor> inputs{input.contiguous()};
  c10d::AllgatherOptions opts;
  opts.timeout = option_timeout(timeout);
  auto work = checked_call(group, fn, "allgather", [&] {
    return group->allgather(outputs, inputs, opts);
  });
  wait_for(work, group, timeout, fn, "allgather");
  return outputs[0];
}

namespace {
int64_t product(c10::IntArrayRef sizes) {
  return std::accumulate(
      sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}
}  // namespace

at::Tensor as_byte_rows(const at::Tensor& t) {
  const int64_t rows = t.size(0);
  const int64_t elems = product(t.sizes().slice(1));
  at::Tensor flat = t.contiguous().reshape({rows, elems});
  if (flat.scalar_type() == at::kByte) {
    return flat;
  }
  if (flat.scalar_type() == at::kBool) {
    // view(dtype) refuses bool; it is one byte per element as well.
    return flat.to(at::kByte);
  }
  return flat.view(at::kByte);
}

at::Tensor from_byte_rows(
    const at::Tensor& bytes, at::ScalarType dtype, c10::IntArrayRef trailing) {
  std::vector<int64_t> sizes{bytes.size(0)};
  sizes.insert(sizes.end(), trailing.begin(), trailing.end());
  at::Tensor typed;
  if (dtype == at::kByte) {
    typed = bytes;
  } else if (dtype == at::kBool) {
    typed = bytes.to(at::kBool);
  } else {
    typed = bytes.view(dtype);
  }
  return typed.reshape(sizes);
}

at::Tensor alltoall_tensor_rows(
    const at::Tensor& local,
    const ProcessGroupPtr& group,
    const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& recv_counts,
    std::chrono::milliseconds timeout,
    const char* fn) {
  const int64_t total =
      std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  at::Tensor bytes = as_byte_rows(local);
  at::Tensor output = at::empty({total, bytes.size(1)}, bytes.options());
  alltoall_rows(group, output, bytes, recv_counts, send_counts, timeout, fn);
  return from_byte_rows(output, local.scalar_type(), local.sizes().slice(1));
}

void check_counts(
    const std::vector<int64_t>& counts,
    const char* name,
    int world,
    const std::string& prefix) {
  TORCH_CHECK(
      static_cast<int>(counts.size()) == world,
      prefix,
      "expected ",
      name,
      ".size() == world size (",
      world,
      "), got ",
      counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    TORCH_CHECK(
        counts[r] >= 0,
        prefix,
        "expected ",
        name,
        "[",
        r,
        "] >= 0, got ",
        counts[r]);
  }
}

ProcessGroupPtr group_from_ivalue(const c10::IValue& v) {
  auto holder = v.toCapsule();
  auto* pg = dynamic_cast<c10d::ProcessGroup*>(holder.get());
  TORCH_INTERNAL_ASSERT(pg != nullptr, "saved process group has wrong type");
  return ProcessGroupPtr::unsafe_reclaim_from_nonowning(pg);
}

}  // namespace internal
}  // namespace frameshard
