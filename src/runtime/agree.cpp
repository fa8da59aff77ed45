// agree(): encode's consensus step without a plan.
#include <frameshard/runtime/agree.h>

#include "runtime/consensus.h"
#include "tower/check.h"

#include <vector>

namespace frameshard {

void agree(
    const ProcessGroupPtr& group,
    uint64_t fingerprint,
    const std::exception_ptr& local_error,
    const char* fn,
    const char* subject,
    c10::Device device,
    std::chrono::milliseconds timeout) {
  if (!group) {
    if (local_error) {
      std::rethrow_exception(local_error);
    }
    return;
  }
  internal::ConsensusRecord mine;
  mine.ok = !local_error;
  if (local_error) {
    mine.error = detail::exception_text(local_error);
  }
  mine.fingerprint = fingerprint;
  mine.rows = 0;
  const std::vector<int64_t> rows(static_cast<size_t>(group->getSize()), 0);
  internal::run_consensus(group, mine, rows, device, timeout, fn, subject);
}

}  // namespace frameshard
