// !!! Internal header: frameshard_parity (frameshard::parity), not installed.
//
// The sharded-versus-replicated parity harness behind `frameshard verify` and
// every multi-rank parity test. It runs one tower through
// frameshard::encode on every rank and through the replicated path in one
// process, and measures, in float64, how far apart they are:
//   * rank-specific losses on different rows: rank q's loss uses the gathered
//     rows it owns (i % world == q, or spec.token_owner; with
//     spec.route_to_owner encode delivers only those), weighted by
//     rank-specific random weights (a sequence shard, as under CP), so a
//     backward that returned only a rank's own rows' gradient would fail;
//   * the replicated reference: the tower on every row, loss = the sum over q
//     of the rank losses (run on rank 0);
//   * output diffs (every rank's gathered outputs vs the reference, max over
//     ranks) and per-parameter gradient diffs (the gradients of the rank
//     losses summed over ranks vs the reference gradients);
//   * the slice-only control: the gradient a backward returning each rank
//     only its own rows' gradient would give, compared with the reference;
//     it must differ by clearly more than the tolerance, or the gradient
//     check could not fail;
//   * optionally a float64 "exact" run from the same dtype-rounded
//     parameters and pixels (how far bfloat16 itself is from exact).
// Towers come from a TowerFactory, so the toy tower (frameshard::models) and
// the Qwen towers are served alike without this library depending on them;
// any number of outputs (embeddings, DeepStack), any dtype, any PlanOptions.
// Tolerances are the caller's: the report carries the figures.
//
// Usage (ranks as threads here; a process per rank passes {rank} instead):
//   parity::ParitySpec spec;
//   spec.grid = {{1, 8, 12}, {4, 4, 4}};
//   spec.plan.world = 3;                 // + policy forced on, partitioner...
//   spec.in_features = 96;
//   parity::TowerFactory factory = [](at::ScalarType dtype) {
//     models::ToyTower t(models::ToyTowerOptions{});  // same seed each call
//     t->to(dtype);
//     return parity::module_instance(models::as_vision_tower(t), *t);
//   };
//   const auto setup = parity::prepare(spec, factory, {0, 1, 2});
//   // on every rank r, with its group of 3:
//   parity::RankParity mine = parity::run_rank(setup, r, group);
//   if (mine.report) {                   // rank 0
//     EXPECT_LE(mine.report->max_gradient_diff(), 1e-12);
//   }
//
// Collective: run_rank (every rank of `group`, with setups prepared from the
// same spec and factory). prepare and rank_loss are not collective.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace frameshard {
namespace parity {

/// One instance of the tower under test: its forward and its parameters (in
/// one fixed order, with names for the report).
struct TowerInstance {
  VisionTower forward;
  std::vector<std::string> names;
  std::vector<at::Tensor> parameters;  // leaves that require grad
  /// Moves the tower (parameters in place) to a device; set by
  /// module_instance, needed only for RankOptions::device other than CPU.
  std::function<void(c10::Device)> to_device;
};

/// `forward` with the named parameters of `module` (e.g. a ToyTower or a
/// Qwen tower's module); it can move to a device (TowerInstance::to_device).
TowerInstance module_instance(
    VisionTower forward, std::shared_ptr<torch::nn::Module> module);

/// Builds a fresh instance with parameters in `dtype`. prepare() seeds torch
/// with ParitySpec::seed before every call, so a factory that draws its
/// parameters from torch's generator, or copies them from a prototype, gives
/// identical instances. The float64 exact instance gets its values copied
/// from the working-dtype one, so only its structure matters.
using TowerFactory = std::function<TowerInstance(at::ScalarType dtype)>;

struct ParitySpec {
  std::vector<GridThw> grid;
  /// plan.world is the number of ranks (the CP size); plan.layout must be
  /// the grid's.
  PlanOptions plan;
  /// Of the tower's parameters and of the pixels.
  at::ScalarType dtype = at::kDouble;
  /// Width of a pixel row (channels * temporal patch * patch^2).
  int64_t in_features = 0;
  /// torch::manual_seed before each tower instance; the pixels and the loss
  /// weights are drawn after the first instance.
  uint64_t seed = 0;
  /// Scale the loss weights by 1/sqrt(tokens), so losses and gradients stay
  /// O(1) and an absolute bound means the same at any workload size.
  bool normalize_weights = false;
  /// Also run the replicated path in float64 from the same dtype-rounded
  /// parameters and pixels (verify's bfloat16 rule); ignored for float64.
  bool exact_reference = false;
  /// Compute the slice-only control (one more replicated backward).
  bool slice_only_control = true;
  /// Timeout of encode's collectives; 0: the group's.
  std::chrono::milliseconds timeout{0};
  /// Names of the outputs in the report; missing ones are "output<k>".
  std::vector<std::string> output_names;
  /// Which rank's loss uses each token (the sequence shard it falls in);
  /// empty: token i belongs to rank i % world.
  std::vector<int64_t> token_owner;
  /// Encode with EncodeOptions::token_owner: each rank receives only its
  /// rows (an all-to-all) instead of all of them (the all-gather).
  bool route_to_owner = false;
  /// Repeated frames: unit i's pixel rows copy unit same_as[i]'s (same_as[i]
  /// <= i, of equal h x w); empty: every unit drawn afresh.
  std::vector<int64_t> same_as;
  /// Encode with EncodeOptions::unit_keys hashed from the pixels
  /// (frame_keys): each distinct frame once. The reference encodes every
  /// use, as a run without dedup does.
  bool dedup = false;
};

/// What every rank shares: the same on every rank, drawn without
/// communication.
struct ParityProblem {
  ParitySpec spec;
  FrameSet frames;              // the grid expanded (tokens, units)
  at::Tensor pixel_values;      // [patch rows, in_features], spec.dtype
  at::Tensor grid_thw;          // int64 [media, 3]
  std::vector<int64_t> widths;  // of the tower's outputs
  /// spec.token_owner, or i % world: the rank whose loss uses token i.
  std::vector<int64_t> owner;
  /// [rank q][output k]: float64 [rows owned by q, widths[k]].
  std::vector<std::vector<at::Tensor>> weights;

  /// The tokens rank q owns, ascending, as an int64 tensor.
  at::Tensor owned_rows(int q) const;

  int world() const {
    return static_cast<int>(spec.plan.world);
  }
  int64_t tokens() const {
    return frames.total_tokens;
  }
};

/// The problem and the tower instances one process needs.
struct ParitySetup {
  ParityProblem problem;
  /// [world]; built only for the ranks this process runs.
  std::vector<TowerInstance> towers;
  /// The replicated reference and, with exact_reference and a dtype other
  /// than float64, its float64 copy; built only when rank 0 is local.
  TowerInstance reference;
  TowerInstance exact;
};

/// Not collective. Seeds torch, builds the towers of `local_ranks` (and the
/// reference ones when rank 0 is among them), draws the pixels and the loss
/// weights. Run it on one thread: torch's generator is process-wide.
ParitySetup prepare(
    const ParitySpec& spec,
    const TowerFactory& factory,
    const std::vector<int>& local_ranks);

/// Rank q's loss on `outputs` (full, original order), in float64: the rows
/// q owns (problem.owner) of every output times weights[q][k], summed.
/// `row_mask` (float64 [tokens, 1], optional) multiplies the rows first.
/// `owned_only`: `outputs` already holds just q's rows, ascending (encode
/// with token_owner).
at::Tensor rank_loss(
    const ParityProblem& problem,
    const std::vector<at::Tensor>& outputs,
    int q,
    const at::Tensor& row_mask = at::Tensor(),
    bool owned_only = false);

/// One output or parameter gradient, sharded vs replicated, in float64.
struct TensorDiff {
  std::string name;
  double max_abs_diff = 0.0;  // NaN counts as infinite
  double max_abs_ref = 0.0;   // of the replicated value
  // Frobenius norms (rank 0's outputs for an output diff).
  double norm_diff = 0.0;       // ||sharded - replicated||
  double norm_ref_error = 0.0;  // ||replicated - exact|| (exact run only)
  double norm_exact = 0.0;      // ||exact|| (exact run only)

  /// The bfloat16 bound on norm_diff (`frameshard verify`'s rule):
  /// kBf16ErrorFactor * norm_ref_error + kBf16Slack * norm_exact. Norms,
  /// not maxima: the bf16 error of a single element is too noisy to bound,
  /// and bf16 reductions are themselves inexact (hence the exact run).
  double bf16_bound() const;
};

constexpr double kBf16ErrorFactor = 3.0;
constexpr double kBf16Slack = 1.0 / 128;  // two bf16 rounding steps (2^-8)

/// One rank's figures.
struct RankFigures {
  int64_t bytes_sent = 0;    // payload of the forward gather
  int64_t tower_rows = 0;    // pixel rows its tower got (floor, dummy incl.)
  double encode_ms = 0.0;    // encode (tower + gather)
  double backward_ms = 0.0;  // its loss's backward (gather's included)
};

struct ParityReport {
  ShardPlan plan;                     // rank 0's
  std::vector<TensorDiff> outputs;    // max abs diff: max over ranks
  std::vector<TensorDiff> gradients;  // one per parameter, summed over ranks
  std::vector<RankFigures> ranks;
  /// Max over parameters of |slice-only gradient - reference gradient|;
  /// nullopt when not computed (disabled, world 1, replicated plan).
  std::optional<double> slice_only_diff;
  double reference_ms = 0.0;  // replicated (and exact) forward + backward

  double max_output_diff() const;
  double max_gradient_diff() const;
  /// Max |reference gradient| over every parameter.
  double gradient_scale() const;
  /// The gradient with the largest max abs diff (the first on ties).
  const TensorDiff& worst_gradient() const;
};

struct RankOptions {
  /// This rank's device: its tower moves there and gets its pixel rows
  /// there (e.g. cuda:r); losses, gradients and the comparison stay on the
  /// CPU in float64. The reference runs on the CPU.
  c10::Device device = c10::Device(c10::kCPU);
  /// The group encode runs on (e.g. a counting wrapper); default: the
  /// harness's group. The harness's own reductions use its group.
  ProcessGroupPtr encode_group;
  /// Multiplies this rank's loss (a fault for negative tests: the gradient
  /// check must then fail).
  double loss_scale = 1.0;
  /// Called right after encode returns and after this rank's backward.
  std::function<void()> after_encode;
  std::function<void()> after_backward;
};

struct RankParity {
  EncodeResult encode;  // this rank's outputs, plan, bytes sent
  /// This rank's parameter gradients (of its own loss only), float64,
  /// flattened in parameter order.
  at::Tensor local_grads;
  RankFigures figures;
  std::optional<ParityReport> report;  // rank 0 only
};

/// Collective over `group` (see the banner): the sharded path and this
/// rank's backward, the gradient sum over ranks, the replicated reference
/// on rank 0, the comparison. `setup` must hold this rank's tower (and the
/// reference ones on rank 0).
RankParity run_rank(
    const ParitySetup& setup,
    int rank,
    const ProcessGroupPtr& group,
    const RankOptions& options = {});

}  // namespace parity
}  // namespace frameshard
