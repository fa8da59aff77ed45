// parity::run_rank: one rank's sharded encode and backward, the reductions
// over ranks, and (rank 0) the comparison with the replicated reference.

#include <frameshard/runtime/frame_keys.h>

#include "parity/steps.h"

#include <frameshard/error.h>

#include <torch/torch.h>

#include <chrono>

namespace frameshard {
namespace parity {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kRunRankFn = "parity::run_rank";

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void call(const std::function<void()>& hook) {
  if (hook) {
    hook();
  }
}

// This rank's part: encode, its own loss, its backward (the gather's backward
// is collective, so every rank runs it even without rows of its own).
RankParity run_sharded(
    const ParityProblem& p,
    const TowerInstance& tower,
    int rank,
    const ProcessGroupPtr& encode_group,
    const RankOptions& options) {
  EncodeOptions eo;
  eo.plan = p.spec.plan;
  eo.timeout = p.spec.timeout;
  if (p.spec.route_to_owner) {
    eo.token_owner = p.owner;
  }
  eo.tower_trainable = false;
  for (const auto& t : tower.parameters) {
    eo.tower_trainable = eo.tower_trainable || t.requires_grad();
  }
  RankParity out;
  VisionTower counted = [&](const TowerInput& in) {
    out.figures.tower_rows += in.pixel_values.size(0);
    return tower.forward(in);
  };
  const auto t0 = Clock::now();
  const at::Tensor pixels = p.pixel_values.to(options.device);
  if (p.spec.dedup) {
    eo.unit_keys = frame_keys(pixels, p.grid_thw, p.spec.plan.layout);
  }
  out.encode = encode(counted, pixels, p.grid_thw, encode_group, eo);
  call(options.after_encode);
  const auto t1 = Clock::now();
  at::Tensor loss = rank_loss(
      p, out.encode.outputs, rank, at::Tensor(), p.spec.route_to_owner);
  if (options.loss_scale != 1.0) {
    loss = loss * options.loss_scale;
  }
  out.local_grads = flat_gradients(loss, tower.parameters);
  call(options.after_backward);
  const auto t2 = Clock::now();
  out.figures.bytes_sent = out.encode.bytes_sent;
  out.figures.encode_ms = ms_between(t0, t1);
  out.figures.backward_ms = ms_between(t1, t2);
  return out;
}

void allreduce(
    const ProcessGroupPtr& group,
    at::Tensor& t,
    c10d::ReduceOp op = c10d::ReduceOp::SUM) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  group->allreduce(v, o)->wait();
}

// Max abs diff of this rank's gathered outputs vs the reference, per output.
at::Tensor output_diffs(
    const ParityProblem& p,
    const std::vector<at::Tensor>& outputs,
    const at::Tensor& reference,
    int rank) {
  const int64_t n = static_cast<int64_t>(p.widths.size());
  TORCH_CHECK(
      static_cast<int64_t>(outputs.size()) == n,
      detail::error_prefix(kRunRankFn, rank, p.world()),
      "expected ",
      n,
      " outputs from encode, got ",
      outputs.size());
  at::Tensor diffs = torch::zeros({n}, torch::kDouble);
  int64_t col = 0;
  for (int64_t k = 0; k < n; ++k) {
    const at::Tensor ref = reference.narrow(1, col, p.widths[k]);
    col += p.widths[k];
    const at::Tensor got = outputs[k].detach().to(torch::kCPU, torch::kDouble);
    TORCH_CHECK(
        got.sizes() == ref.sizes(),
        detail::error_prefix(kRunRankFn, rank, p.world()),
        "expected output ",
        k,
        " of shape ",
        ref.sizes(),
        ", got ",
        got.sizes());
    diffs[k] = max_abs(got - ref);
  }
  return diffs;
}

double frobenius(const at::Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.norm().item<double>();
}

// `exact` is undefined unless the exact run happened.
TensorDiff make_diff(
    std::string name,
    double max_abs_diff,
    const at::Tensor& sharded,
    const at::Tensor& ref,
    const at::Tensor& exact) {
  TensorDiff d;
  d.name = std::move(name);
  d.max_abs_diff = max_abs_diff;
  d.max_abs_ref = max_abs(ref);
  d.norm_diff = frobenius(sharded - ref);
  if (exact.defined()) {
    d.norm_ref_error = frobenius(ref - exact);
    d.norm_exact = frobenius(exact);
  }
  return d;
}

at::Tensor narrow_or_undefined(
    const at::Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return t.defined() ? t.narrow(dim, start, length) : at::Tensor();
}

std::vector<TensorDiff> compare_outputs(
    const ParityProblem& p,
    const std::vector<at::Tensor>& outputs,
    const Reference& ref,
    const at::Tensor& max_diffs) {
  std::vector<TensorDiff> diffs;
  int64_t col = 0;
  for (size_t k = 0; k < p.widths.size(); ++k) {
    const int64_t w = p.widths[k];
    const std::string name = k < p.spec.output_names.size()
                                 ? p.spec.output_names[k]
                                 : "output" + std::to_string(k);
    // Rank 0's rows: all of them, or (route_to_owner) the ones it owns.
    at::Tensor rows;
    if (p.spec.route_to_owner) {
      rows = p.owned_rows(0);
    }
    auto mine = [&rows](const at::Tensor& t) {
      return t.defined() && rows.defined() ? t.index_select(0, rows) : t;
    };
    diffs.push_back(make_diff(
        name,
        max_diffs[static_cast<int64_t>(k)].item<double>(),
        outputs[k].detach().to(torch::kDouble),
        mine(ref.outputs.narrow(1, col, w)),
        mine(narrow_or_undefined(ref.exact_outputs, 1, col, w))));
    col += w;
  }
  return diffs;
}

std::vector<TensorDiff> compare_gradients(
    const TowerInstance& tower,
    const at::Tensor& summed,
    const Reference& ref) {
  std::vector<TensorDiff> diffs;
  int64_t off = 0;
  for (size_t i = 0; i < tower.parameters.size(); ++i) {
    const int64_t n = tower.parameters[i].numel();
    const at::Tensor got = summed.narrow(0, off, n);
    const at::Tensor want = ref.grads.narrow(0, off, n);
    diffs.push_back(make_diff(
        tower.names[i],
        max_abs(got - want),
        got,
        want,
        narrow_or_undefined(ref.exact_grads, 0, off, n)));
    off += n;
  }
  return diffs;
}

// Rank 0: everything the ranks reduced, compared with the reference.
ParityReport make_report(
    const ParitySetup& setup,
    const RankParity& mine,
    const Reference& ref,
    const at::Tensor& summed_grads,
    const at::Tensor& max_output_diffs,
    const at::Tensor& figures) {
  ParityReport r;
  r.plan = mine.encode.plan;
  r.outputs = compare_outputs(
      setup.problem, mine.encode.outputs, ref, max_output_diffs);
  r.gradients = compare_gradients(setup.reference, summed_grads, ref);
  for (int64_t q = 0; q < figures.size(0); ++q) {
    RankFigures f;
    f.bytes_sent = static_cast<int64_t>(figures[q][0].item<double>());
    f.tower_rows = static_cast<int64_t>(figures[q][1].item<double>());
    f.encode_ms = figures[q][2].item<double>();
    f.backward_ms = figures[q][3].item<double>();
    r.ranks.push_back(f);
  }
  if (ref.slice_only_grads.defined()) {
    r.slice_only_diff = max_abs(ref.slice_only_grads - ref.grads);
  }
  r.reference_ms = ref.ms;
  return r;
}

}  // namespace

RankParity run_rank(
    const ParitySetup& setup,
    int rank,
    const ProcessGroupPtr& group,
    const RankOptions& options) {
  const ParityProblem& p = setup.problem;
  const int world = p.world();
  TORCH_CHECK(
      group->getSize() == world && group->getRank() == rank,
      detail::error_prefix(kRunRankFn, rank, world),
      "expected a group of size ",
      world,
      " in which this is rank ",
      rank,
      ", got rank ",
      group->getRank(),
      " of ",
      group->getSize());
  TORCH_CHECK(
      setup.towers[rank].forward,
      detail::error_prefix(kRunRankFn, rank, world),
      "expected prepare() to have built this rank's tower");
  if (!options.device.is_cpu()) {
    TORCH_CHECK(
        static_cast<bool>(setup.towers[rank].to_device),
        detail::error_prefix(kRunRankFn, rank, world),
        "expected a tower that can move to ",
        options.device,
        " (module_instance), got one without to_device");
    setup.towers[rank].to_device(options.device);
  }
  RankParity mine = run_sharded(
      p,
      setup.towers[rank],
      rank,
      options.encode_group ? options.encode_group : group,
      options);
  at::Tensor summed = mine.local_grads.clone();
  allreduce(group, summed);

  // The replicated reference on rank 0 only (every rank would compute the
  // same); the others wait for its outputs.
  Reference ref;
  int64_t total_width = 0;
  for (int64_t w : p.widths) {
    total_width += w;
  }
  at::Tensor ref_outputs =
      torch::empty({p.tokens(), total_width}, torch::kDouble);
  if (rank == 0) {
    ref = replicated_reference(setup, mine.encode.plan);
    ref_outputs = ref.outputs;
  }
  {
    std::vector<at::Tensor> v{ref_outputs};
    group->broadcast(v)->wait();
  }
  // With route_to_owner a rank holds only its own rows.
  at::Tensor out_diffs = output_diffs(
      p,
      mine.encode.outputs,
      p.spec.route_to_owner ? ref_outputs.index_select(0, p.owned_rows(rank))
                            : ref_outputs,
      rank);
  allreduce(group, out_diffs, c10d::ReduceOp::MAX);
  // Per-rank figures, each rank filling its slot.
  at::Tensor figures = torch::zeros({world, 4}, torch::kDouble);
  figures[rank][0] = double(mine.figures.bytes_sent);
  figures[rank][1] = double(mine.figures.tower_rows);
  figures[rank][2] = mine.figures.encode_ms;
  figures[rank][3] = mine.figures.backward_ms;
  allreduce(group, figures);
  if (rank == 0) {
    mine.report = make_report(setup, mine, ref, summed, out_diffs, figures);
  }
  return mine;
}

double TensorDiff::bf16_bound() const {
  return kBf16ErrorFactor * norm_ref_error + kBf16Slack * norm_exact;
}

double ParityReport::max_output_diff() const {
  double m = 0.0;
  for (const auto& d : outputs) {
    m = std::max(m, d.max_abs_diff);
  }
  return m;
}

double ParityReport::max_gradient_diff() const {
  return gradients.empty() ? 0.0 : worst_gradient().max_abs_diff;
}

double ParityReport::gradient_scale() const {
  double m = 0.0;
  for (const auto& d : gradients) {
    m = std::max(m, d.max_abs_ref);
  }
  return m;
}

const TensorDiff& ParityReport::worst_gradient() const {
  static const TensorDiff kNone{};
  const TensorDiff* worst = gradients.empty() ? &kNone : &gradients[0];
  for (const auto& d : gradients) {
    if (d.max_abs_diff > worst->max_abs_diff) {
      worst = &d;
    }
  }
  return *worst;
}

}  // namespace parity
}  // namespace frameshard
