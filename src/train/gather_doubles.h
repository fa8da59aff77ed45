// !!! Internal header of frameshard::train, not installed. !!!
//
// One all-gather of a fixed-size record of doubles per rank, for the small
// per-step exchanges of the trainer (gather_step_metrics, the online cost
// model's samples). Collective over `group` (every rank, the same record
// size). Defined in src/train/gather_doubles.cpp.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <vector>

namespace frameshard {
namespace train {
namespace detail {

/// Every rank's `mine`, concatenated in rank order (CPU doubles: Gloo, or
/// an NCCL group's Gloo backend; counts below 2^53 travel exactly). A null
/// group or a group of one returns `mine`.
std::vector<double> all_gather_doubles(
    const std::vector<double>& mine, const ProcessGroupPtr& group);

}  // namespace detail
}  // namespace train
}  // namespace frameshard
