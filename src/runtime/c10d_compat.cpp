#include "runtime/c10d_compat.h"

namespace frameshard {
namespace internal {

c10::intrusive_ptr<c10d::Work> all_to_all_single(
    const ProcessGroupPtr& group,
    at::Tensor& output,
    at::Tensor& input,
    std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits,
    const c10d::AllToAllOptions& options) {
#if FRAMESHARD_C10D_ALL_TO_ALL_SINGLE
  return group->all_to_all_single(
      output, input, output_splits, input_splits, options);
#else
  return group->alltoall_base(
      output, input, output_splits, input_splits, options);
#endif
}

}  // namespace internal
}  // namespace frameshard
