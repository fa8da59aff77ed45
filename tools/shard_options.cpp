#include "shard_options.h"

#include <frameshard/partition.h>

namespace frameshard {
namespace cli {

void apply_shard_options(
    PlanOptions& o,
    int nproc,
    const std::string& partitioner,
    int64_t min_local_patch_rows) {
  o.world = nproc;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  if (!partitioner.empty()) {
    o.partitioner = parse_partitioner(partitioner, "--partitioner");
  }
  if (min_local_patch_rows >= 0) {
    o.min_local_patch_rows = min_local_patch_rows;
  }
}

}  // namespace cli
}  // namespace frameshard
