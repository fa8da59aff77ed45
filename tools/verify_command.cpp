// `frameshard verify`: sharded vs replicated parity of a random Qwen-style
// tower over N local rank processes.
//
// The parent validates every option, resolves (and if needed scales down)
// the workload, writes it to a fresh temporary directory and starts N copies
// of this binary (fork + exec of /proc/self/exe) in a hidden worker mode
// (`verify --worker-rank r --store-path DIR/store ...`). The workers
// rendezvous through a c10d::FileStore in that directory and each:
//   1. seeds torch and builds the same ToyTower, pixel rows and per-rank loss
//      weights (identical on every rank);
//   2. runs frameshard::encode (always the sharded path: the policy is forced
//      on with zero thresholds) and back-propagates ITS loss: rank r uses the
//      gathered rows i with i % N == r (a sequence shard, as under CP) with
//      rank-specific weights, so a backward that returned only a rank's own
//      rows' gradient would fail;
//   3. all-reduces the parameter gradients (summed over ranks, in float64);
// rank 0 also runs the replicated reference (the tower on every row, loss =
// the sum over r of the rank losses) and everyone compares. Rank 0 prints the
// report. Exit codes: 0 pass, 1 a difference above the tolerance, 2 an error
// (bad option, a rank failed or was killed).
//
// Tolerances (see --help). float64 and float32: absolute bounds on the max
// abs difference of every output and every parameter gradient (1e-12 and
// 1e-5; the loss weights are scaled by 1/sqrt(tokens) so gradients stay
// O(1) and an absolute bound means the same at any workload size).
// bfloat16 cannot agree bitwise: the sharded ranks run GEMMs of other
// shapes, every op rounds to 8 mantissa bits, and a parameter gradient is a
// sum of per-rank partials instead of one reduction over all rows. Worse,
// LibTorch's CPU bf16 kernels accumulate reductions (weight gradients,
// LayerNorm gradients) in bf16, so over thousands of rows the REPLICATED bf16
// gradients are themselves off by up to ~40% (measured) on some tensors. A
// fixed relative bound therefore fails for reasons unrelated to sharding.
// The bf16 rule instead compares against that inherent error: per tensor,
//   ||sharded - replicated|| <= 3 * ||replicated - exact|| + 2^-7 * ||exact||
// (Frobenius norms; `exact` = the same math in float64 from the same
// bf16-valued parameters and pixels, run on rank 0). Sharding passes when it
// disagrees with the replicated bf16 run by no more than bf16's own error
// (measured ratio ||sharded - replicated|| / ||replicated - exact|| <= 2.4).
// float64 is the strict check; bf16 only catches gross errors.
//
// Workloads: presets have frames of up to 65k patches, far beyond what a
// CPU can attend over in seconds, so h and w are divided by the smallest
// integer S (h -> merge * ceil(h / merge / S)) that brings the largest frame
// to <= --max-frame-patches and the total to <= --max-patches; --scale S
// forces S (1: as given). Frame counts, order and media structure are kept.
// The hidden --inject-fault loss|exit exists for the tests (a FAIL and a
// dying rank must be reported, never hang).

#include "commands.h"
#include "dtype_option.h"
#include "rank_processes.h"

#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/models/toy_tower.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/workload.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

struct VerifyArgs {
  int nproc = 2;
  std::string workload_file;
  std::string preset;
  uint64_t seed = 0;
  std::string dtype = "float32";
  std::string partitioner;  // empty: from --config, else optimal
  std::string config_file;
  int64_t min_local_patch_rows = -1;  // -1: from --config, else 96
  bool json = false;
  int64_t timeout_ms = 60000;
  int64_t scale = 0;  // 0: automatic
  int64_t max_frame_patches = 1024;
  int64_t max_patches = 16384;
  // Hidden worker mode.
  int worker_rank = -1;
  std::string store_path;
  std::string workload_label;
  // Testing only (hidden): "loss" scales the last rank's loss by 1 + 1e-3
  // (gradients must then FAIL), "exit" ends the last rank right after the
  // rendezvous (the others must error out, not hang).
  std::string inject_fault = "none";
};

// The default workload: small, but with every case that matters: an image,
// videos whose units spread over ranks, frames of different sizes.
Workload builtin_workload() {
  Workload wl;
  wl.name = "builtin";
  wl.grid = {{1, 8, 12}, {4, 4, 4}, {1, 4, 8}, {3, 6, 4}, {1, 2, 2}, {2, 8, 8}};
  return wl;
}

// ------------------------------------------------------------- workload

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Scales every frame's h and w down by `s`, keeping them positive multiples
// of the merge size: h -> merge * ceil(h / merge / s). t is unchanged, so the
// frame units, their order and the media structure stay the same.
Workload scale_workload(const Workload& wl, int64_t s) {
  Workload out = wl;
  const int64_t m = wl.layout.spatial_merge_size;
  for (auto& g : out.grid) {
    g.h = m * ceil_div(g.h / m, s);
    g.w = m * ceil_div(g.w / m, s);
  }
  return out;
}

struct Sizes {
  int64_t max_frame = 0;
  int64_t total = 0;
};
Sizes workload_sizes(const Workload& wl) {
  Sizes s;
  for (const auto& g : wl.grid) {
    s.max_frame = std::max(s.max_frame, g.h * g.w);
    s.total += g.patches();
  }
  return s;
}

// The smallest factor that brings the largest frame to <= max_frame_patches
// and the total to <= max_patches (0 = no limit); stops when every frame is
// already merge x merge.
int64_t auto_scale(const Workload& wl, const VerifyArgs& a) {
  const int64_t m = wl.layout.spatial_merge_size;
  int64_t limit = 1;
  for (const auto& g : wl.grid) {
    limit = std::max({limit, g.h / m, g.w / m});
  }
  for (int64_t s = 1; s < limit; ++s) {
    const Sizes z = workload_sizes(scale_workload(wl, s));
    if ((a.max_frame_patches == 0 || z.max_frame <= a.max_frame_patches) &&
        (a.max_patches == 0 || z.total <= a.max_patches)) {
      return s;
    }
  }
  return limit;
}

struct Resolved {
  Workload workload;  // scaled
  std::string label;  // what the user asked for
  int64_t scale = 1;
  int64_t original_patches = 0;
};

Resolved resolve_workload(const VerifyArgs& a) {
  Resolved r;
  Workload wl;
  if (!a.workload_file.empty()) {
    wl = load_workload(a.workload_file);
    r.label = "file " + a.workload_file;
  } else if (!a.preset.empty()) {
    wl = preset_workload(a.preset, a.seed);
    r.label = "preset " + a.preset + " (seed " + std::to_string(a.seed) + ")";
  } else {
    wl = builtin_workload();
    r.label = "builtin";
  }
  // Validate the workload as given, so errors name the user's rows.
  const FrameSet frames = expand_frames(wl.grid, wl.layout);
  FRAMESHARD_CHECK(
      !frames.units.empty(),
      "verify",
      "expected a workload with at least one frame, got none");
  r.original_patches = frames.total_patch_rows;
  FRAMESHARD_CHECK(
      a.scale >= 0, "verify", "expected --scale >= 0, got ", a.scale);
  r.scale = a.scale > 0 ? a.scale : auto_scale(wl, a);
  r.workload = scale_workload(wl, r.scale);
  return r;
}

at::ScalarType parse_dtype(const std::string& name) {
  return parse_dtype_option(
      name, "verify", {at::kDouble, at::kFloat, at::kBFloat16});
}

// float64 / float32: an absolute bound on the max abs difference.
// bfloat16: per tensor, ||sharded - replicated|| <= error_factor *
// ||replicated - exact|| + slack * ||exact|| (Frobenius norms), where
// `exact` is the same computation in float64 from the same (bf16-valued)
// parameters and pixels. Norms, not maxima: the bf16 error of a single
// element is too noisy to bound.
struct Tolerance {
  bool bf16_rule = false;
  double abs = 0.0;
  double error_factor = 3.0;
  double slack = 1.0 / 128;  // two bf16 rounding steps (2^-8 each)
};
Tolerance tolerance_for(at::ScalarType dtype) {
  Tolerance t;
  if (dtype == at::kDouble) {
    t.abs = 1e-12;
  } else if (dtype == at::kFloat) {
    t.abs = 1e-5;
  } else {
    t.bf16_rule = true;
  }
  return t;
}

PlanOptions verify_plan_options(const VerifyArgs& a, const Workload& wl) {
  PlanOptions o;
  if (!a.config_file.empty()) {
    o = plan_options(load_config(a.config_file));
  }
  o.world = a.nproc;
  o.layout = wl.layout;
  // verify always exercises the sharded path (unless --nproc 1).
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  if (!a.partitioner.empty()) {
    o.partitioner = parse_partitioner(a.partitioner, "--partitioner");
  }
  if (a.min_local_patch_rows >= 0) {
    o.min_local_patch_rows = a.min_local_patch_rows;
  }
  return o;
}

models::ToyTowerOptions tower_options(const Workload& wl) {
  models::ToyTowerOptions t;
  t.temporal_patch_size = wl.layout.temporal_patch_size;
  t.spatial_merge_size = wl.layout.spatial_merge_size;
  return t;
}

// ------------------------------------------------------------- worker

at::Tensor grid_tensor(const std::vector<GridThw>& grid) {
  std::vector<int64_t> flat;
  for (const auto& g : grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  return torch::tensor(flat, torch::kLong)
      .view({static_cast<int64_t>(grid.size()), 3});
}

// Rank q's loss: its sequence shard (rows i % world == q) of every output,
// weighted by weights[q][k], summed in float64.
at::Tensor rank_loss(
    const std::vector<at::Tensor>& outputs,
    const std::vector<std::vector<at::Tensor>>& weights,
    int64_t q,
    int64_t world) {
  at::Tensor loss = torch::zeros({}, torch::kDouble);
  for (size_t k = 0; k < outputs.size(); ++k) {
    at::Tensor rows = torch::arange(q, outputs[k].size(0), world);
    loss = loss +
           (outputs[k].index_select(0, rows).to(torch::kDouble) * weights[q][k])
               .sum();
  }
  return loss;
}

at::Tensor flat_grads(
    const at::Tensor& loss, const std::vector<at::Tensor>& params) {
  auto grads = torch::autograd::grad(
      {loss},
      params,
      /*grad_outputs=*/{},
      /*retain_graph=*/false,
      /*create_graph=*/false,
      /*allow_unused=*/true);
  std::vector<at::Tensor> flat;
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor g = grads[i].defined() ? grads[i] : torch::zeros_like(params[i]);
    flat.push_back(g.detach().to(torch::kDouble).reshape({-1}));
  }
  return torch::cat(flat);
}

void wait_work(const c10::intrusive_ptr<c10d::Work>& work) {
  work->wait();
}

std::string hex64(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

struct Diff {
  std::string name;
  double max_abs_diff = 0.0;  // sharded vs replicated (max over ranks)
  double max_abs_ref = 0.0;   // of the replicated value
  // bfloat16 only (Frobenius norms).
  double norm_diff = 0.0;       // ||sharded - replicated||
  double norm_ref_error = 0.0;  // ||replicated - exact||
  double norm_exact = 0.0;      // ||exact||
  double bound = 0.0;           // on max_abs_diff (f64/f32) or norm_diff (bf16)
  bool bf16_rule = false;
};

double max_abs(const at::Tensor& t) {
  if (t.numel() == 0) {
    return 0.0;
  }
  // NaN anywhere counts as an infinite difference.
  if (t.isnan().any().item<bool>()) {
    return std::numeric_limits<double>::infinity();
  }
  return t.abs().max().item<double>();
}

double frobenius(const at::Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.norm().item<double>();
}

// `sharded`, `ref` and `exact` are float64; `exact` is undefined unless
// bfloat16. `max_abs_diff` comes from every rank (outputs) or rank 0.
Diff make_diff(
    std::string name,
    double max_abs_diff,
    const at::Tensor& sharded,
    const at::Tensor& ref,
    const at::Tensor& exact,
    const Tolerance& tol) {
  Diff d;
  d.name = std::move(name);
  d.max_abs_diff = max_abs_diff;
  d.max_abs_ref = max_abs(ref);
  d.bf16_rule = tol.bf16_rule;
  if (tol.bf16_rule) {
    d.norm_diff = frobenius(sharded - ref);
    d.norm_ref_error = frobenius(ref - exact);
    d.norm_exact = frobenius(exact);
    d.bound = tol.error_factor * d.norm_ref_error + tol.slack * d.norm_exact;
  } else {
    d.bound = tol.abs;
  }
  return d;
}

bool within(const Diff& d) {
  const double v = d.bf16_rule ? d.norm_diff : d.max_abs_diff;
  return std::isfinite(d.max_abs_diff) && std::isfinite(v) && v <= d.bound;
}

nlohmann::json plan_json(const ShardPlan& plan) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : plan.ranks) {
    ranks.push_back({
        {"rank", r.rank},
        {"units", r.units.size()},
        {"patch_rows", r.real_patch_rows},
        {"local_patch_rows", r.local_patch_rows},
        {"tokens", r.real_tokens},
        {"local_tokens", r.local_tokens},
        {"pad_frames", r.pad_frames},
        {"dummy_frames", r.dummy_frames},
        {"cost", r.cost},
    });
  }
  return {
      {"path", to_string(plan.path)},
      {"reason", plan.reason},
      {"fingerprint", hex64(plan.fingerprint)},
      {"partitioner", to_string(plan.options.partitioner)},
      {"cost_model", plan.options.cost.label},
      {"min_local_patch_rows", plan.options.min_local_patch_rows},
      {"imbalance", plan.partition.imbalance()},
      {"units", plan.frames.units.size()},
      {"ranks", ranks},
  };
}

int run_worker(const VerifyArgs& a) {
  at::set_num_threads(1);
  const int rank = a.worker_rank;
  const int world = a.nproc;
  const Workload wl = load_workload(a.workload_file);
  const PlanOptions po = verify_plan_options(a, wl);
  const at::ScalarType dtype = parse_dtype(a.dtype);
  const Tolerance tol = tolerance_for(dtype);

  // Same seed, same draws in the same order on every rank.
  torch::manual_seed(a.seed);
  models::ToyTower tower(tower_options(wl));
  tower->to(dtype);
  const FrameSet frames = expand_frames(wl.grid, wl.layout);
  const int64_t rows = frames.total_patch_rows;
  const int64_t tokens = frames.total_tokens;
  at::Tensor pixels =
      torch::randn({rows, tower->options().in_features()}, torch::kDouble)
          .to(dtype);
  std::vector<int64_t> widths{tower->options().out_hidden};
  if (tower->options().deepstack) {
    widths.push_back(tower->options().out_hidden);
  }
  // Scaled so the losses and gradients stay O(1) at any workload size.
  const double wscale = 1.0 / std::sqrt(double(std::max<int64_t>(tokens, 1)));
  std::vector<std::vector<at::Tensor>> weights(world);
  for (int q = 0; q < world; ++q) {
    for (int64_t width : widths) {
      const int64_t mine = (tokens - q + world - 1) / world;
      weights[q].push_back(
          torch::randn({std::max<int64_t>(mine, 0), width}, torch::kDouble) *
          wscale);
    }
  }
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : tower->named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  const at::Tensor grid = grid_tensor(wl.grid);

  GroupOptions go;
  go.timeout = std::chrono::milliseconds(a.timeout_ms);
  go.threads = 1;
  ProcessGroupPtr pg = make_file_store_group(a.store_path, rank, world, go);
  const bool faulty_rank = rank == world - 1;
  if (faulty_rank && a.inject_fault == "exit") {
    std::fprintf(stderr, "verify: rank %d exits (--inject-fault exit)\n", rank);
    std::fflush(stderr);
    std::_Exit(3);
  }

  // Sharded path.
  EncodeOptions eo;
  eo.plan = po;
  eo.timeout = std::chrono::milliseconds(a.timeout_ms);
  eo.tower_trainable = has_trainable_parameters(*tower);
  const auto t0 = Clock::now();
  EncodeResult res =
      encode(models::as_vision_tower(tower), pixels, grid, pg, eo);
  const auto t1 = Clock::now();
  at::Tensor my_loss = rank_loss(res.outputs, weights, rank, world);
  if (faulty_rank && a.inject_fault == "loss") {
    my_loss = my_loss * (1.0 + 1e-3);
  }
  at::Tensor sharded_grads = flat_grads(my_loss, params);
  const auto t2 = Clock::now();
  {
    std::vector<at::Tensor> v{sharded_grads};
    wait_work(pg->allreduce(v));
  }

  // Replicated reference on rank 0 only (every rank would compute the same).
  at::Tensor ref_outputs;  // [tokens, sum(widths)] float64
  at::Tensor ref_grads;
  at::Tensor exact_outputs, exact_grads;  // bfloat16 only, rank 0
  double ref_ms = 0.0;
  if (rank == 0) {
    const auto r0 = Clock::now();
    TowerInput full{pixels, grid, frame_cu_seqlens(wl.grid)};
    std::vector<at::Tensor> outs = tower->forward(full);
    at::Tensor loss = torch::zeros({}, torch::kDouble);
    for (int q = 0; q < world; ++q) {
      loss = loss + rank_loss(outs, weights, q, world);
    }
    std::vector<at::Tensor> detached;
    for (const auto& o : outs) {
      detached.push_back(o.detach().to(torch::kDouble));
    }
    ref_outputs = torch::cat(detached, 1).contiguous();
    ref_grads = flat_grads(loss, params);
    if (tol.bf16_rule) {
      // The same math in float64 from the same bf16-valued parameters and
      // pixels: measures how far bf16 itself is from exact on this workload.
      models::ToyTower exact(tower->options());
      exact->to(torch::kDouble);
      {
        torch::NoGradGuard no_grad;
        auto src = tower->named_parameters();
        for (auto& p : exact->named_parameters()) {
          p.value().copy_(src[p.key()].to(torch::kDouble));
        }
      }
      TowerInput in64{
          pixels.to(torch::kDouble), grid, frame_cu_seqlens(wl.grid)};
      std::vector<at::Tensor> eo = exact->forward(in64);
      at::Tensor eloss = torch::zeros({}, torch::kDouble);
      for (int q = 0; q < world; ++q) {
        eloss = eloss + rank_loss(eo, weights, q, world);
      }
      std::vector<at::Tensor> ed;
      for (const auto& o : eo) {
        ed.push_back(o.detach());
      }
      exact_outputs = torch::cat(ed, 1);
      exact_grads = flat_grads(eloss, exact->parameters());
    }
    ref_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - r0).count();
  } else {
    int64_t total_width = 0;
    for (int64_t w : widths) {
      total_width += w;
    }
    ref_outputs = torch::empty({tokens, total_width}, torch::kDouble);
  }
  {
    std::vector<at::Tensor> v{ref_outputs};
    wait_work(pg->broadcast(v));
  }

  // Every rank compares its gathered outputs with the reference.
  TORCH_CHECK(
      res.outputs.size() == widths.size(),
      detail::error_prefix("verify", rank, world),
      "expected ",
      widths.size(),
      " outputs from encode, got ",
      res.outputs.size());
  const int n_out = static_cast<int>(widths.size());
  at::Tensor out_diff = torch::zeros({n_out}, torch::kDouble);
  {
    int64_t col = 0;
    for (int k = 0; k < n_out; ++k) {
      at::Tensor ref = ref_outputs.narrow(1, col, widths[k]);
      col += widths[k];
      at::Tensor got = res.outputs[k].detach().to(torch::kDouble);
      TORCH_CHECK(
          got.sizes() == ref.sizes(),
          detail::error_prefix("verify", rank, world),
          "expected output ",
          k,
          " of shape ",
          ref.sizes(),
          ", got ",
          got.sizes());
      out_diff[k] = max_abs(got - ref);
    }
  }
  // Per-rank figures, each rank filling its slot: bytes, times.
  at::Tensor stats = torch::zeros({world, 3}, torch::kDouble);
  stats[rank][0] = double(res.bytes_sent);
  stats[rank][1] = std::chrono::duration<double, std::milli>(t1 - t0).count();
  stats[rank][2] = std::chrono::duration<double, std::milli>(t2 - t1).count();
  {
    std::vector<at::Tensor> v{out_diff};
    c10d::AllreduceOptions mx;
    mx.reduceOp = c10d::ReduceOp::MAX;
    wait_work(pg->allreduce(v, mx));
    std::vector<at::Tensor> s{stats};
    wait_work(pg->allreduce(s));
  }
  if (rank != 0) {
    return 0;
  }

  // Report (rank 0).
  const ShardPlan& plan = res.plan;
  std::vector<Diff> outputs;
  const char* out_names[] = {"embeddings", "deepstack"};
  {
    int64_t col = 0;
    for (int k = 0; k < n_out; ++k) {
      at::Tensor ref = ref_outputs.narrow(1, col, widths[k]);
      at::Tensor ex = exact_outputs.defined()
                          ? exact_outputs.narrow(1, col, widths[k])
                          : at::Tensor();
      col += widths[k];
      outputs.push_back(make_diff(
          k < 2 ? out_names[k] : "output" + std::to_string(k),
          out_diff[k].item<double>(),
          res.outputs[k].detach().to(torch::kDouble),
          ref,
          ex,
          tol));
    }
  }
  std::vector<Diff> grads;
  Diff worst;
  worst.max_abs_diff = -1.0;
  bool pass = true;
  {
    int64_t off = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t n = params[i].numel();
      at::Tensor ref = ref_grads.narrow(0, off, n);
      at::Tensor ex =
          exact_grads.defined() ? exact_grads.narrow(0, off, n) : at::Tensor();
      Diff d = make_diff(
          names[i],
          max_abs(sharded_grads.narrow(0, off, n) - ref),
          sharded_grads.narrow(0, off, n),
          ref,
          ex,
          tol);
      off += n;
      pass = pass && within(d);
      if (!(d.max_abs_diff <= worst.max_abs_diff)) {
        worst = d;
      }
      grads.push_back(d);
    }
  }
  for (const auto& d : outputs) {
    pass = pass && within(d);
  }
  int64_t row_bytes = 0;
  for (int64_t w : widths) {
    row_bytes += w * int64_t(c10::elementSize(dtype));
  }
  std::vector<int64_t> bytes_sent, padded_bytes;
  std::vector<double> encode_ms, backward_ms;
  for (int r = 0; r < world; ++r) {
    bytes_sent.push_back(int64_t(stats[r][0].item<double>()));
    padded_bytes.push_back(
        plan.sharded()
            ? gather_traffic(plan.gather_counts, r, row_bytes).padded_bytes
            : 0);
    encode_ms.push_back(stats[r][1].item<double>());
    backward_ms.push_back(stats[r][2].item<double>());
  }
  const std::string tol_text =
      tol.bf16_rule
          ? "per tensor, ||sharded - replicated|| <= " +
                c10::str(tol.error_factor) +
                " x ||replicated - float64 exact|| + " + c10::str(tol.slack) +
                " x ||exact|| (Frobenius; bf16 reductions are themselves "
                "inexact)"
          : "max abs diff <= " + c10::str(tol.abs);

  auto diff_json = [&](const Diff& d) {
    nlohmann::json j = {
        {"name", d.name},
        {"max_abs_diff", d.max_abs_diff},
        {"max_abs_ref", d.max_abs_ref},
        {"bound", d.bound},
        {"pass", within(d)}};
    if (tol.bf16_rule) {
      j["norm_diff"] = d.norm_diff;
      j["norm_replicated_error"] = d.norm_ref_error;
      j["norm_exact"] = d.norm_exact;
    }
    return j;
  };

  if (a.json) {
    nlohmann::json grid_rows = nlohmann::json::array();
    for (const auto& g : wl.grid) {
      grid_rows.push_back({g.t, g.h, g.w});
    }
    nlohmann::json j;
    j["pass"] = pass;
    j["nproc"] = world;
    j["dtype"] = a.dtype;
    j["seed"] = a.seed;
    j["tolerance"] =
        tol.bf16_rule
            ? nlohmann::
                  json{{"kind", "bf16_norm_vs_replicated_error"}, {"error_factor", tol.error_factor}, {"slack", tol.slack}, {"text", tol_text}}
            : nlohmann::json{
                  {"kind", "absolute"}, {"value", tol.abs}, {"text", tol_text}};
    j["workload"] = {
        {"name", a.workload_label},
        {"grid_thw", grid_rows},
        {"spatial_merge_size", wl.layout.spatial_merge_size},
        {"temporal_patch_size", wl.layout.temporal_patch_size},
        {"patch_rows", rows},
        {"tokens", tokens}};
    j["plan"] = plan_json(plan);
    nlohmann::json od;
    for (const auto& d : outputs) {
      od[d.name] = diff_json(d);
    }
    j["outputs"] = od;
    nlohmann::json gd = nlohmann::json::array();
    for (const auto& d : grads) {
      gd.push_back(diff_json(d));
    }
    j["gradients"] = gd;
    j["max_abs_diff"] = {
        {"embeddings", outputs[0].max_abs_diff},
        {"deepstack",
         outputs.size() > 1 ? nlohmann::json(outputs[1].max_abs_diff)
                            : nlohmann::json(nullptr)},
        {"gradients", worst.max_abs_diff},
        {"worst_gradient", worst.name}};
    j["bytes_sent"] = bytes_sent;
    j["padded_allgather_bytes"] = padded_bytes;
    j["encode_ms"] = encode_ms;
    j["backward_ms"] = backward_ms;
    j["reference_ms"] = ref_ms;
    std::cout << j.dump(2) << std::endl;
  } else {
    std::ostringstream os;
    os << "frameshard verify: " << world << " rank processes, dtype " << a.dtype
       << ", seed " << a.seed << "\n";
    os << "workload: " << a.workload_label << ": " << wl.grid.size()
       << " media, " << frames.units.size() << " frame units, " << rows
       << " patch rows, " << tokens << " tokens\n";
    os << "  grid_thw:";
    for (const auto& g : wl.grid) {
      os << " (" << g.t << "," << g.h << "," << g.w << ")";
    }
    os << "\n";
    // The policy is forced on (zero thresholds): verify always shards when
    // nproc > 1.
    os << "plan: " << to_string(plan.path) << " (" << plan.reason
       << "; policy forced on by verify), partitioner "
       << to_string(plan.options.partitioner) << ", imbalance " << std::fixed
       << std::setprecision(3) << plan.partition.imbalance() << ", fingerprint "
       << hex64(plan.fingerprint) << "\n";
    os << "  rank  units  patch_rows  local_rows  tokens  pad_frames  dummy"
       << "  bytes_sent  padded_bytes  encode_ms  backward_ms\n";
    for (const auto& r : plan.ranks) {
      const auto i = static_cast<size_t>(r.rank);
      os << "  " << std::setw(4) << r.rank << "  " << std::setw(5)
         << r.units.size() << "  " << std::setw(10) << r.real_patch_rows << "  "
         << std::setw(10) << r.local_patch_rows << "  " << std::setw(6)
         << r.real_tokens << "  " << std::setw(10) << r.pad_frames << "  "
         << std::setw(5) << r.dummy_frames << "  " << std::setw(10)
         << bytes_sent[i] << "  " << std::setw(12) << padded_bytes[i] << "  "
         << std::setw(9) << std::setprecision(1) << encode_ms[i] << "  "
         << std::setw(11) << backward_ms[i] << std::setprecision(3) << "\n";
    }
    os << "reference (replicated, rank 0): " << std::setprecision(1) << ref_ms
       << " ms forward+backward\n";
    os << std::scientific << std::setprecision(3);
    auto line = [&](const Diff& d) {
      os << "  " << std::left << std::setw(28) << d.name << std::right
         << " max abs diff " << d.max_abs_diff << "  (max abs ref "
         << d.max_abs_ref;
      if (tol.bf16_rule) {
        os << "; norms: diff " << d.norm_diff << ", bf16 error "
           << d.norm_ref_error << ", bound " << d.bound;
      }
      os << ")" << (within(d) ? "" : "  EXCEEDS") << "\n";
    };
    os << "outputs (sharded vs replicated, every rank):\n";
    for (const auto& d : outputs) {
      line(d);
    }
    os << "parameter gradients (summed over ranks vs replicated):\n";
    for (const auto& d : grads) {
      line(d);
    }
    os << "max abs diff: embeddings " << outputs[0].max_abs_diff;
    if (outputs.size() > 1) {
      os << ", deepstack " << outputs[1].max_abs_diff;
    }
    os << ", gradients " << worst.max_abs_diff << " (" << worst.name << ")\n";
    os << "tolerance (" << a.dtype << "): " << tol_text << "\n";
    os << (pass ? "PASS" : "FAIL") << "\n";
    std::cout << os.str() << std::flush;
  }
  return pass ? 0 : 1;
}

// ------------------------------------------------------------- parent

// The options of every worker (the launcher adds --worker-rank and
// --store-path).
std::vector<std::string> worker_args(
    const VerifyArgs& a, const std::string& dir, const std::string& label) {
  std::vector<std::string> v{
      "--workload",
      dir + "/workload.json",
      "--workload-label",
      label,
      "--scale",
      "1",
      "--nproc",
      std::to_string(a.nproc),
      "--seed",
      std::to_string(a.seed),
      "--dtype",
      a.dtype,
      "--timeout-ms",
      std::to_string(a.timeout_ms)};
  if (!a.partitioner.empty()) {
    v.insert(v.end(), {"--partitioner", a.partitioner});
  }
  if (!a.config_file.empty()) {
    v.insert(
        v.end(),
        {"--config", std::filesystem::absolute(a.config_file).string()});
  }
  if (a.min_local_patch_rows >= 0) {
    v.insert(
        v.end(),
        {"--min-local-patch-rows", std::to_string(a.min_local_patch_rows)});
  }
  if (a.json) {
    v.push_back("--json");
  }
  if (a.inject_fault != "none") {
    v.insert(v.end(), {"--inject-fault", a.inject_fault});
  }
  return v;
}

int run_parent(const VerifyArgs& a) {
  check_rank_options("verify", a.nproc, a.timeout_ms);
  FRAMESHARD_CHECK(
      a.max_frame_patches >= 0 && a.max_patches >= 0,
      "verify",
      "expected --max-frame-patches and --max-patches >= 0, got ",
      a.max_frame_patches,
      " and ",
      a.max_patches);
  parse_dtype(a.dtype);
  const Resolved r = resolve_workload(a);
  // Plan here too: a bad --config / --partitioner / workload is reported
  // once, before any process starts.
  make_plan(r.workload.grid, verify_plan_options(a, r.workload));

  std::string label = r.label;
  if (r.scale > 1) {
    label += ", h and w scaled down " + std::to_string(r.scale) + "x (" +
             std::to_string(r.original_patches) + " -> " +
             std::to_string(workload_sizes(r.workload).total) + " patch rows)";
  }

  TempDir dir("verify");
  {
    Workload wl = r.workload;
    wl.name = r.label;
    std::ofstream f(dir.path() + "/workload.json");
    f << to_json(wl);
    FRAMESHARD_CHECK(
        f.good(), "verify", "expected to write ", dir.path(), "/workload.json");
  }

  RankLaunch launch;
  launch.command = "verify";
  launch.nproc = a.nproc;
  launch.store_path = dir.path() + "/store";
  launch.worker_args = worker_args(a, dir.path(), label);
  launch.timeout = std::chrono::milliseconds(a.timeout_ms);
  launch.max_result_code = 1;  // a difference above tolerance
  return run_rank_processes(launch);
}

}  // namespace

void register_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check sharded vs replicated parity of a random Qwen-style tower over "
      "N local rank processes (outputs and every parameter gradient).");
  cmd->footer(
      "Tolerances: float64 max abs diff <= 1e-12, float32 <= 1e-5 "
      "(absolute, every output and parameter gradient). bfloat16, per "
      "tensor: ||sharded - replicated|| <= 3 x ||replicated - exact|| + "
      "2^-7 x ||exact|| (Frobenius; exact = float64 from the same bf16 "
      "values), because LibTorch's CPU bf16 reductions are themselves "
      "inexact; float64 is the strict check.\n"
      "Workloads are scaled down (h, w -> merge*ceil(h/merge/S)) so that the "
      "largest frame has <= --max-frame-patches and the total <= "
      "--max-patches patch rows, unless --scale is given; frame counts and "
      "order are kept.\n"
      "Exit codes: 0 pass, 1 a difference above tolerance, 2 an error.");
  cmd->add_option("--nproc", args->nproc, "Rank processes to start")
      ->capture_default_str();
  auto* wl =
      cmd->add_option("--workload", args->workload_file, "Workload JSON file");
  auto* preset = cmd->add_option(
      "--preset",
      args->preset,
      "Synthetic preset: doc | multi | video | mixed (default: a small "
      "built-in workload)");
  wl->excludes(preset);
  cmd->add_option("--seed", args->seed, "Seed of the tower, pixels, preset")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "float64 | float32 | bfloat16")
      ->capture_default_str()
      ->check(CLI::IsMember({"float64", "float32", "bfloat16"}));
  cmd->add_option(
      "--partitioner",
      args->partitioner,
      "optimal | greedy | count | lpt (default: from --config, else "
      "optimal)");
  cmd->add_option(
      "--config", args->config_file, "YAML config (cost model, floor, ...)");
  cmd->add_option(
      "--min-local-patch-rows",
      args->min_local_patch_rows,
      "Floor of local patch rows (default: from --config, else 96)");
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option(
         "--timeout-ms",
         args->timeout_ms,
         "Collective timeout per rank; raise it for large workloads (the "
         "others wait while rank 0 runs the replicated reference)")
      ->capture_default_str();
  cmd->add_option(
         "--scale",
         args->scale,
         "Divide every h and w by S (0: automatic, 1: as given)")
      ->capture_default_str();
  cmd->add_option(
         "--max-frame-patches",
         args->max_frame_patches,
         "Automatic scale: largest frame after scaling (0: no limit)")
      ->capture_default_str();
  cmd->add_option(
         "--max-patches",
         args->max_patches,
         "Automatic scale: total patch rows after scaling (0: no limit)")
      ->capture_default_str();
  // Hidden worker mode (started by the parent).
  cmd->add_option("--worker-rank", args->worker_rank)->group("");
  cmd->add_option("--store-path", args->store_path)->group("");
  cmd->add_option("--workload-label", args->workload_label)->group("");
  cmd->add_option("--inject-fault", args->inject_fault)
      ->group("")
      ->check(CLI::IsMember({"none", "loss", "exit"}));

  cmd->callback([args] {
    int code = 0;
    if (args->worker_rank >= 0) {
      code = run_worker_guarded(
          "verify", args->worker_rank, [&] { return run_worker(*args); });
    } else {
      code = run_parent(*args);
    }
    if (code != 0) {
      throw CLI::RuntimeError(code);
    }
  });
}

}  // namespace cli
}  // namespace frameshard
