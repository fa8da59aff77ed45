// Gloo group creation in a build without gloo's headers
// (FRAMESHARD_GLOO_GROUPS OFF, as `pip install .` builds the Python
// extension, which receives its groups from torch.distributed): a clear
// error instead of a missing symbol. gloo_groups.cpp is the real one.
#include <frameshard/error.h>

#include "runtime/c10d_compat.h"

namespace frameshard {
namespace internal {

ProcessGroupPtr gloo_process_group(
    const StorePtr& /*store*/,
    int /*rank*/,
    int /*size*/,
    const GroupOptions& /*options*/) {
  FRAMESHARD_CHECK(
      false,
      "make_gloo_group",
      "expected a build with gloo's headers (FRAMESHARD_GLOO_GROUPS ON; "
      "Debian: libgloo-dev) to create a Gloo group in C++, got a build "
      "without them (from Python, pass a torch.distributed group instead)");
  return {};
}

ProcessGroupPtr nccl_process_group(
    const StorePtr& /*store*/,
    int /*rank*/,
    int /*size*/,
    const GroupOptions& /*options*/) {
  FRAMESHARD_CHECK(
      false,
      "make_nccl_group",
      "expected a build with gloo's headers (an NCCL group holds a Gloo "
      "backend for CPU tensors), got a build without them");
  return {};
}

}  // namespace internal
}  // namespace frameshard
