// !!! Internal header of frameshard::runtime, not installed. !!!
// thin blocking wrappers over the c10d collectives the runtime
// uses, with one place for timeouts and error wording. Defined in
// src/runtime/collectives.cpp.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace internal {

/// "frameshard::<fn>: [rank r/W] ".
std::string rank_prefix(const char* fn, const ProcessGroupPtr& group);

/// alltoall_base(output, input, output_splits, input_splits), waited for.
/// A timeout of 0 uses the group's default. Failures (a peer that exited,
/// a timeout) raise c10::Error naming `fn`, the rank and the collective.
void alltoall_rows(
    const ProcessGroupPtr& group,
    at::Tensor& output,
    at::Tensor& input,
    const std::vector<int64_t>& output_splits,
    const std::vector<int64_t>& input_splits,
    std::chrono::milliseconds timeout,
    const char* fn);

/// Equal-size all-gather of `input` (same shape and dtype on every rank);
/// returns one tensor per rank, in rank order.
std::vector<at::Tensor> allgather_equal(
    const ProcessGroupPtr& group,
    const at::Tensor& input,
    std::chrono::milliseconds timeout,
    const char* fn);

/// [rows, trailing...] of any dtype -> contiguous [rows, row_bytes] uint8:
/// the collectives move bytes, so any dtype works whatever the backend's
/// kernels (bfloat16, bool, complex).
at::Tensor as_byte_rows(const at::Tensor& t);

/// Inverse of as_byte_rows: [rows, row_bytes] uint8 -> [rows, trailing...].
at::Tensor from_byte_rows(
    const at::Tensor& bytes, at::ScalarType dtype, c10::IntArrayRef trailing);

/// One alltoall_rows of the rows of `local` as bytes (any dtype, any
/// trailing shape): send_counts[q] rows to rank q, in order, and
/// recv_counts[q] from rank q; returns the received rows, [sum(recv_counts),
/// trailing...] of local's dtype. Not differentiable (the gather's and the
/// route's autograd Functions run it forward and backward).
at::Tensor alltoall_tensor_rows(
    const at::Tensor& local,
    const ProcessGroupPtr& group,
    const std::vector<int64_t>& send_counts,
    const std::vector<int64_t>& recv_counts,
    std::chrono::milliseconds timeout,
    const char* fn);

/// `counts` (named `name` in the error) has one entry >= 0 per rank of a
/// group of `world`; raises c10::Error "<prefix>expected <name>.size() ==
/// world size (W), got N" or "<prefix>expected <name>[r] >= 0, got X".
void check_counts(
    const std::vector<int64_t>& counts,
    const char* name,
    int world,
    const std::string& prefix);

/// The process group an autograd Function saved as a capsule.
ProcessGroupPtr group_from_ivalue(const c10::IValue& v);

}  // namespace internal
}  // namespace frameshard
