// The replicated reference of the parity harness (rank 0, one process): the
// tower on every row with loss = the sum over ranks of the rank losses, the
// optional float64 exact run, and the slice-only control.

#include "parity/steps.h"

#include <torch/torch.h>

#include <chrono>
#include <functional>

namespace frameshard {
namespace parity {
namespace {

using Clock = std::chrono::steady_clock;

struct Replicated {
  at::Tensor outputs;  // float64 [tokens, sum(widths)]
  at::Tensor grads;    // float64, flat
};

// The tower on every row of `pixels`; loss = sum over q of rank q's loss,
// its rows first multiplied by mask_of(q) when given.
Replicated run_replicated(
    const ParityProblem& p,
    const TowerInstance& tower,
    const at::Tensor& pixels,
    const std::function<at::Tensor(int)>& mask_of = nullptr) {
  const TowerInput full = whole_frames_input(pixels, p.spec.grid);
  const std::vector<at::Tensor> outs = tower.forward(full);
  at::Tensor loss = torch::zeros({}, torch::kDouble);
  for (int q = 0; q < p.world(); ++q) {
    loss = loss + rank_loss(p, outs, q, mask_of ? mask_of(q) : at::Tensor());
  }
  std::vector<at::Tensor> detached;
  for (const auto& o : outs) {
    detached.push_back(o.detach().to(torch::kDouble));
  }
  Replicated r;
  r.outputs = torch::cat(detached, 1).contiguous();
  r.grads = flat_gradients(loss, tower.parameters);
  return r;
}

// float64 [tokens, 1]: 1 on the token rows of the units `plan` gives rank q.
at::Tensor own_rows(const ShardPlan& plan, int64_t tokens, int q) {
  at::Tensor own = torch::zeros({tokens, 1}, torch::kDouble);
  for (size_t u = 0; u < plan.frames.units.size(); ++u) {
    if (plan.partition.assignment[u] == q) {
      const auto& unit = plan.frames.units[u];
      own.narrow(0, unit.token_offset, unit.tokens).fill_(1.0);
    }
  }
  return own;
}

}  // namespace

Reference replicated_reference(
    const ParitySetup& setup, const ShardPlan& plan) {
  const ParityProblem& p = setup.problem;
  Reference ref;
  const auto start = Clock::now();
  const Replicated r = run_replicated(p, setup.reference, p.pixel_values);
  ref.outputs = r.outputs;
  ref.grads = r.grads;
  if (setup.exact.forward) {
    // The same math in float64 from the same dtype-valued parameters and
    // pixels: how far the working dtype itself is from exact here.
    const Replicated e =
        run_replicated(p, setup.exact, p.pixel_values.to(torch::kDouble));
    ref.exact_outputs = e.outputs;
    ref.exact_grads = e.grads;
  }
  ref.ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (p.spec.slice_only_control && p.world() > 1 && plan.sharded()) {
    // What a slice-only backward would give: rank q's tower receives only
    // q's loss gradient, and only on the rows q computed.
    ref.slice_only_grads =
        run_replicated(p, setup.reference, p.pixel_values, [&](int q) {
          return own_rows(plan, p.tokens(), q);
        }).grads;
  }
  return ref;
}

}  // namespace parity
}  // namespace frameshard
