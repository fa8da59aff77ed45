// The parity problem: tower instances, pixels and rank-specific loss weights
// (identical on every rank), the rank losses and their gradients.

#include "parity/steps.h"

#include "tower/check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace frameshard {
namespace parity {
namespace {

constexpr const char* kPrepareFn = "parity::prepare";

// The widths of the tower's outputs, from one minimal (1, merge, merge) frame
// of zeros: the frame encode gives an empty rank, so every tower takes it.
std::vector<int64_t> probe_widths(
    const TowerInstance& tower, const ParitySpec& spec) {
  const int64_t m = spec.plan.layout.spatial_merge_size;
  const std::vector<GridThw> one{{1, m, m}};
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor> outs = tower.forward(whole_frames_input(
      at::zeros({m * m, spec.in_features}, at::dtype(spec.dtype)), one));
  FRAMESHARD_TORCH_CHECK(
      !outs.empty(), kPrepareFn, "expected a tower with outputs, got none");
  std::vector<int64_t> widths;
  for (const auto& o : outs) {
    FRAMESHARD_TORCH_CHECK(
        o.dim() == 2,
        kPrepareFn,
        "expected [rows, hidden] tower outputs, got ",
        o.dim(),
        " dims");
    widths.push_back(o.size(1));
  }
  return widths;
}

// spec.same_as: unit i's rows become a copy of unit same_as[i]'s.
void copy_repeats(ParityProblem& p) {
  const auto& same = p.spec.same_as;
  if (same.empty()) {
    return;
  }
  FRAMESHARD_CHECK(
      same.size() == p.frames.units.size(),
      kPrepareFn,
      "expected same_as to have one entry per frame unit (",
      p.frames.units.size(),
      "), got ",
      same.size());
  for (size_t i = 0; i < same.size(); ++i) {
    const FrameUnit& u = p.frames.units[i];
    FRAMESHARD_CHECK(
        same[i] >= 0 && same[i] <= static_cast<int64_t>(i) &&
            p.frames.units[static_cast<size_t>(same[i])].patch_rows ==
                u.patch_rows,
        kPrepareFn,
        "expected same_as[",
        i,
        "] to name an earlier unit of equal size, got ",
        same[i]);
    const FrameUnit& s = p.frames.units[static_cast<size_t>(same[i])];
    p.pixel_values.narrow(0, u.pixel_offset, u.patch_rows)
        .copy_(p.pixel_values.narrow(0, s.pixel_offset, s.patch_rows));
  }
}

// Pixels, then per rank q and output k the weights of q's rows (drawn in that
// order from torch's generator, right after the first tower instance).
void draw_inputs(ParityProblem& p) {
  const int world = p.world();
  const int64_t tokens = p.tokens();
  p.pixel_values =
      torch::randn(
          {p.frames.total_patch_rows, p.spec.in_features}, torch::kDouble)
          .to(p.spec.dtype);
  copy_repeats(p);
  const double scale =
      p.spec.normalize_weights
          ? 1.0 / std::sqrt(double(std::max<int64_t>(tokens, 1)))
          : 1.0;
  p.weights.assign(world, {});
  for (int q = 0; q < world; ++q) {
    const int64_t mine = std::count(p.owner.begin(), p.owner.end(), q);
    for (int64_t width : p.widths) {
      at::Tensor w = torch::randn({mine, width}, torch::kDouble);
      p.weights[q].push_back(p.spec.normalize_weights ? w * scale : w);
    }
  }
}

TowerInstance seeded_instance(
    const TowerFactory& factory, uint64_t seed, at::ScalarType dtype) {
  torch::manual_seed(seed);
  return factory(dtype);
}

// The float64 twin of `from`: the factory's structure, `from`'s values.
TowerInstance exact_copy(
    const TowerFactory& factory, uint64_t seed, const TowerInstance& from) {
  TowerInstance exact = seeded_instance(factory, seed, at::kDouble);
  FRAMESHARD_TORCH_CHECK(
      exact.names == from.names,
      kPrepareFn,
      "expected the float64 instance to have the same parameters, got ",
      exact.names.size(),
      " vs ",
      from.names.size());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < exact.parameters.size(); ++i) {
    exact.parameters[i].copy_(from.parameters[i].to(at::kDouble));
  }
  return exact;
}

}  // namespace

TowerInstance module_instance(
    VisionTower forward, std::shared_ptr<torch::nn::Module> module) {
  TowerInstance t;
  t.forward = std::move(forward);
  for (const auto& item : module->named_parameters()) {
    t.names.push_back(item.key());
    t.parameters.push_back(item.value());
  }
  // Module::to moves parameters in place: t.parameters stay the leaves.
  t.to_device = [module](c10::Device d) { module->to(d); };
  return t;
}

ParitySetup prepare(
    const ParitySpec& spec,
    const TowerFactory& factory,
    const std::vector<int>& local_ranks) {
  const int world = static_cast<int>(spec.plan.world);
  FRAMESHARD_TORCH_CHECK(
      world >= 1, kPrepareFn, "expected plan.world >= 1, got ", world);
  FRAMESHARD_TORCH_CHECK(
      !local_ranks.empty(),
      kPrepareFn,
      "expected at least one local rank, got none");
  ParitySetup s;
  s.problem.spec = spec;
  s.problem.frames = expand_frames(spec.grid, spec.plan.layout);
  s.problem.grid_thw = grid_to_tensor(spec.grid);
  s.problem.owner = spec.token_owner;
  if (s.problem.owner.empty()) {
    for (int64_t i = 0; i < s.problem.frames.total_tokens; ++i) {
      s.problem.owner.push_back(i % world);
    }
  }
  FRAMESHARD_TORCH_CHECK(
      static_cast<int64_t>(s.problem.owner.size()) ==
          s.problem.frames.total_tokens,
      kPrepareFn,
      "expected token_owner to have one entry per token (",
      s.problem.frames.total_tokens,
      "), got ",
      s.problem.owner.size());
  s.towers.resize(world);
  bool first = true;
  for (int r : local_ranks) {
    FRAMESHARD_TORCH_CHECK(
        r >= 0 && r < world,
        kPrepareFn,
        "expected local ranks in [0, ",
        world,
        "), got ",
        r);
    s.towers[r] = seeded_instance(factory, spec.seed, spec.dtype);
    if (first) {
      // The draws follow the first instance, as `frameshard verify` always
      // did: same seed, same tower, pixels and weights.
      s.problem.widths = probe_widths(s.towers[r], spec);
      draw_inputs(s.problem);
      first = false;
    }
  }
  if (std::find(local_ranks.begin(), local_ranks.end(), 0) !=
      local_ranks.end()) {
    s.reference = seeded_instance(factory, spec.seed, spec.dtype);
    if (spec.exact_reference && spec.dtype != at::kDouble) {
      s.exact = exact_copy(factory, spec.seed, s.reference);
    }
  }
  return s;
}

at::Tensor ParityProblem::owned_rows(int q) const {
  std::vector<int64_t> rows;
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] == q) {
      rows.push_back(static_cast<int64_t>(i));
    }
  }
  return torch::tensor(rows, torch::kLong);
}

at::Tensor rank_loss(
    const ParityProblem& problem,
    const std::vector<at::Tensor>& outputs,
    int q,
    const at::Tensor& row_mask,
    bool owned_only) {
  at::Tensor loss = torch::zeros({}, torch::kDouble);
  const at::Tensor rows = problem.owned_rows(q);
  for (size_t k = 0; k < outputs.size(); ++k) {
    at::Tensor mine = owned_only
                          ? outputs[k].to(torch::kCPU, torch::kDouble)
                          : outputs[k]
                                .index_select(0, rows.to(outputs[k].device()))
                                .to(torch::kCPU, torch::kDouble);
    if (row_mask.defined()) {
      mine = mine * row_mask.index_select(0, rows);
    }
    loss = loss + (mine * problem.weights[q][k]).sum();
  }
  return loss;
}

at::Tensor flat_gradients(
    const at::Tensor& loss, const std::vector<at::Tensor>& parameters) {
  auto grads = torch::autograd::grad(
      {loss},
      parameters,
      /*grad_outputs=*/{},
      /*retain_graph=*/false,
      /*create_graph=*/false,
      /*allow_unused=*/true);
  std::vector<at::Tensor> flat;
  for (size_t i = 0; i < parameters.size(); ++i) {
    at::Tensor g =
        grads[i].defined() ? grads[i] : torch::zeros_like(parameters[i]);
    flat.push_back(g.detach().to(torch::kCPU, torch::kDouble).reshape({-1}));
  }
  return flat.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(flat);
}

double max_abs(const at::Tensor& t) {
  if (t.numel() == 0) {
    return 0.0;
  }
  if (t.isnan().any().item<bool>()) {
    return std::numeric_limits<double>::infinity();
  }
  return t.abs().max().item<double>();
}

}  // namespace parity
}  // namespace frameshard
