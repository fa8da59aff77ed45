// !!! Internal header of frameshard_parity: the steps its .cpp files share
// (problem.cpp, reference.cpp, run_rank.cpp); users include parity.h.
//
// Usage (what run_rank does on rank 0):
//   Reference ref = replicated_reference(setup, rank0_plan);
//   at::Tensor g = flat_gradients(loss, tower.parameters);
//   double d = max_abs(g - ref.grads);
//
// Nothing here is collective.
#pragma once

#include "parity/parity.h"

#include <ATen/ATen.h>

#include <vector>

namespace frameshard {
namespace parity {

/// d loss / d parameters in float64, flattened in order; zeros for a
/// parameter the loss does not use.
at::Tensor flat_gradients(
    const at::Tensor& loss, const std::vector<at::Tensor>& parameters);

/// The rank-0 half of run_rank: the replicated reference, float64.
struct Reference {
  at::Tensor outputs;                     // [tokens, sum(widths)]
  at::Tensor grads;                       // flat, parameter order
  at::Tensor exact_outputs, exact_grads;  // exact run only
  at::Tensor slice_only_grads;            // control only
  double ms = 0.0;
};

/// `plan` (rank 0's) tells the slice-only control which rows each rank
/// computed.
Reference replicated_reference(const ParitySetup& setup, const ShardPlan& plan);

/// max |t| with NaN as +inf (0 for an empty tensor).
double max_abs(const at::Tensor& t);

}  // namespace parity
}  // namespace frameshard
