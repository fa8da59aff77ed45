// Timing a reference tower the way the scale simulation
// (bench/scale_sim.cpp) and `frameshard calibrate` do: one torch thread,
// forward + backward of every output summed (or forward only under no_grad
// for a frozen tower), the median of `repeats` runs (wall or process CPU
// time); and each CP rank's
// share of a plan (frameshard::local_tower_input: its frames, floor and
// dummy frames) timed one rank after another in this process.
//
// On a GPU (TowerSpec::device "cuda") the tower, its pixels and its
// gradients live on the device and every timed call is bracketed by a
// device synchronize, so the wall time is the kernels' time, not their
// launch; the CPU clock means nothing there and is refused.
//
// Usage:
//   TowerSpec spec;                        // qwen3-vl, width 256, depth 2
//   spec.device = "cuda"; spec.dtype = at::kBFloat16;   // optional
//   models::QwenVisionModel m = make_timing_tower(spec);
//   TimingRun run{3, false};               // repeats, forward_only
//   double s = time_tower(m, input, run);  // seconds
//   std::vector<double> per_rank = time_rank_shares(m, plan, pixels, run);
#pragma once

#include <frameshard/models/qwen_factory.h>
#include <frameshard/plan.h>
#include <frameshard/tower.h>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// A random-weight tower of a family at a small width and depth, or a
/// Hugging Face checkpoint when model_dir is set.
struct TowerSpec {
  std::string family = "qwen3-vl";  // qwen2-vl | qwen2.5-vl | qwen3-vl
  int64_t width = 256;  // 0: the released width (released_tower_config)
  int64_t depth = 2;
  std::string model_dir;
  std::string device = "cpu";  // cpu | cuda (GPU 0)
  at::ScalarType dtype = at::kFloat;
};

/// The families TowerSpec::family accepts.
std::vector<std::string> timing_tower_families();

/// The config of a small tower: `width` wide (heads of 64), MLP 4x (8/3 x
/// gated for qwen2.5-vl), the last layer full attention (qwen2.5-vl), the
/// first layer deepstack (qwen3-vl), merger output `width`.
models::QwenVisionConfig small_tower_config(
    const std::string& family, int64_t width, int64_t depth);

/// The family's released vision tower (transformers' config defaults:
/// qwen2-vl and qwen2.5-vl width 1280, qwen3-vl 1152) at `depth` layers; the
/// last layer full attention (qwen2.5-vl), the first deepstack (qwen3-vl).
models::QwenVisionConfig released_tower_config(
    const std::string& family, int64_t depth);

/// make_qwen_vision of small_tower_config (released_tower_config for width
/// 0) or load_qwen_vision(model_dir),
/// moved to spec.device and spec.dtype. Throws frameshard::Error naming the
/// field for a device this torch cannot use.
models::QwenVisionModel make_timing_tower(const TowerSpec& spec);

/// "float32" or "bfloat16" and "cpu" or "cuda" of a timing tower, as the
/// programs' options and JSON name them.
std::string timing_dtype_name(const models::QwenVisionModel& m);
std::string timing_device_name(const models::QwenVisionModel& m);

struct TimingRun {
  int repeats = 1;
  bool forward_only = false;
  // Process CPU time instead of wall time: on a machine shared with other
  // jobs, wall time counts their share of the cores too; with one torch
  // thread the CPU time is what the work takes on a dedicated core.
  bool cpu_clock = false;
};

/// Median seconds of one tower call on `in` (see the banner). Throws
/// frameshard::Error for run.cpu_clock on a CUDA input.
double time_tower(
    const models::QwenVisionModel& m, const TowerInput& in, TimingRun run);

/// A rank of a split plan run alone: its exchange returns each piece's own
/// rows padded with zero rows to the whole frame, so the piece's attention
/// (queries against the whole frame) and its backward cost what they cost
/// on the rank; the transfer itself is the caller's to model
/// (RankShard::exchange_rows). Not collective.
PieceExchange standin_exchange(const ShardPlan& plan, int64_t rank);

/// Seconds of each rank's share of `plan`, in rank order (split plans with
/// standin_exchange).
std::vector<double> time_rank_shares(
    const models::QwenVisionModel& m,
    const ShardPlan& plan,
    const at::Tensor& pixels,
    TimingRun run);

/// Random pixel rows for `grid` (what the timings feed the tower), on the
/// tower's device and in its dtype.
at::Tensor random_pixels(
    const models::QwenVisionModel& m, const std::vector<GridThw>& grid);

}  // namespace cli
}  // namespace frameshard
