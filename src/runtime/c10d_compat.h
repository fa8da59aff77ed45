// !!! Internal header of frameshard::runtime, not installed. !!!
//
// Where the c10d API of the torch frameshard builds against shows through:
// building a ProcessGroup from a backend (since torch 2.0 ProcessGroupGloo
// and ProcessGroupNCCL are c10d::Backend objects that a c10d::ProcessGroup
// dispatches to, per device type) and the variable-size all-to-all (renamed
// all_to_all_single in torch 2.15; alltoall_base before). Everything else in
// the runtime uses only the ProcessGroup interface.
//
// Tested with torch 2.15 (the pinned PyPI wheel of scripts/setup-modern.sh).
#pragma once

#include <frameshard/runtime/process_group.h>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <vector>

// ProcessGroup::all_to_all_single (the name of the variable-size all-to-all
// since torch 2.15; alltoall_base, deprecated there, before). Subclasses of
// ProcessGroup (the tests' CountingGroup) override the one this names.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define FRAMESHARD_C10D_ALL_TO_ALL_SINGLE 1
#else
#define FRAMESHARD_C10D_ALL_TO_ALL_SINGLE 0
#endif

namespace frameshard {
namespace internal {

/// A ProcessGroup whose default backend is Gloo, for CPU tensors and CUDA
/// tensors (which Gloo stages through host memory), as torch.distributed
/// registers it.
ProcessGroupPtr gloo_process_group(
    const StorePtr& store, int rank, int size, const GroupOptions& options);

/// A ProcessGroup whose default backend is NCCL (CUDA tensors), with Gloo
/// registered for CPU tensors (gloo_groups.cpp, in a build with the NCCL
/// path only).
ProcessGroupPtr nccl_process_group(
    const StorePtr& store, int rank, int size, const GroupOptions& options);

/// The variable-size all-to-all (c10d's alltoall_base op).
c10::intrusive_ptr<c10d::Work> all_to_all_single(
    const ProcessGroupPtr& group,
    at::Tensor& output,
    at::Tensor& input,
    std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits,
    const c10d::AllToAllOptions& options);

}  // namespace internal
}  // namespace frameshard
