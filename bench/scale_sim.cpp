// Scale simulation of sharded vision: for CP sizes up to 64, run each
// rank's share of a batch (frameshard::local_tower_input: its frames, floor
// and dummy frames) through a real tower, forward + backward, one rank after
// another in this process, and report per partitioner the predicted vision
// speed-up: replicated time / (slowest rank's time + the gather modelled
// from a bandwidth), next to the ideal CP-fold bound and the measured
// imbalance (slowest rank / mean rank) and the sum of the rank times over
// the replicated time (1 when splitting the work costs nothing extra; below
// 1 when smaller shares run faster per row, e.g. a working set that fits a
// CPU cache, which can put the speed-up above the ideal). One table per
// preset.
//
// What it models and what not: rank times are measured (one thread each,
// no contention), the gather is bytes / bandwidth (the slowest receiving
// rank's unpadded bytes), and nothing else of a training step is included.
//
// The last column, `split`, is the optimal partitioner with split_frames:
// a piece runs its queries against its whole frame (tools/tower_timing.h's
// standin_exchange pads its keys to the frame), and the K/V rows it would
// receive are added to its time at the same bandwidth.
//
// The tower and the timing are tools/tower_timing.h's, shared with
// `frameshard calibrate`.
//
// --mesh-dp D (with --manifest files and one --cp C): the mesh mode of
// scale_sim_mesh.h instead, D replicas of real manifest batches under
// mesh_dims [cp] and [dp, cp], the step-level vision bottleneck of each.
//
// Usage: frameshard_scale_sim [--family qwen3-vl] [--width 256] [--depth 2]
//          [--preset mixed ...] [--scale 0] [--max-patches 8192]
//          [--cp 2 --cp 4 ...] [--bandwidth-gbps 25] [--repeats 1]
//        frameshard_scale_sim --mesh-dp 8 --cp 8 --manifest M.jsonl ...
//          [--samples-per-replica 2] [--steps 3] [--scale 4]
#include <frameshard/models/cost_bridge.h>
#include <frameshard/models/qwen_factory.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/encode.h>

#include "scale_sim_mesh.h"
#include "tower_timing.h"
#include "verify_workload.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace frameshard;

struct Args {
  std::string family = "qwen3-vl";
  int64_t width = 256;
  int64_t depth = 2;
  std::vector<std::string> presets{"mixed"};
  int64_t scale = 0;
  int64_t max_patches = 8192;
  std::vector<int64_t> cps{2, 4, 8, 16, 32, 64};
  double bandwidth_gbps = 25.0;
  int repeats = 1;
};

void simulate_preset(
    const Args& a,
    const std::string& preset,
    const models::QwenVisionModel& m) {
  cli::WorkloadRequest req;
  req.preset = preset;
  req.scale = a.scale;
  req.max_patches = a.max_patches;
  const cli::ResolvedWorkload wl = cli::resolve_workload(req);
  const MediaLayout layout = models::media_layout(m.config);
  const FrameSet frames = expand_frames(wl.workload.grid, layout);
  const at::Tensor pixels = cli::random_pixels(m, wl.workload.grid);
  const TowerInput all = whole_frames_input(pixels, wl.workload.grid);
  cli::time_tower(m, all, {1, false});  // warm-up
  const double t_rep = cli::time_tower(m, all, {a.repeats, false});
  const int64_t row_bytes =
      4 * m.config.out_hidden_size() *
      static_cast<int64_t>(m.config.output_names().size());
  std::printf(
      "\n%s: %lld patch rows, %lld frame units, replicated %.3f s\n",
      wl.display_label().c_str(),
      static_cast<long long>(frames.total_patch_rows),
      static_cast<long long>(frames.units.size()),
      t_rep);
  std::printf("%4s %6s", "cp", "ideal");
  for (Partitioner p : all_partitioners()) {
    std::printf("  %8s speedup imbal sum/rep", to_string(p).c_str());
  }
  std::printf("  %8s speedup imbal sum/rep", "split");
  std::printf("\n");
  const TowerDims dims = models::tower_dims(m.config);
  // K and V of one row per full-attention layer, float32.
  const int64_t kv_row_bytes = 2 * dims.hidden * 4 * dims.full_layers();
  auto measure = [&](const ShardPlan& plan) {
    const std::vector<double> times =
        cli::time_rank_shares(m, plan, pixels, {a.repeats, false});
    double slowest = 0.0, sum = 0.0, compute_max = 0.0;
    int64_t received = 0;
    for (size_t r = 0; r < times.size(); ++r) {
      const double exchange = double(plan.ranks[r].exchange_rows) *
                              double(kv_row_bytes) / (a.bandwidth_gbps * 1e9);
      slowest = std::max(slowest, times[r] + exchange);
      compute_max = std::max(compute_max, times[r]);
      sum += times[r];
      received =
          std::max(received, frames.total_tokens - plan.gather_counts[r]);
    }
    const double gather =
        double(received * row_bytes) / (a.bandwidth_gbps * 1e9);
    std::printf(
        "  %8s %7.2f %5.2f %7.2f",
        "",
        t_rep / (slowest + gather),
        compute_max / (sum / double(times.size())),
        sum / t_rep);
  };
  for (int64_t cp : a.cps) {
    std::printf(
        "%4lld %6lld", static_cast<long long>(cp), static_cast<long long>(cp));
    PlanOptions o;
    o.world = cp;
    o.layout = layout;
    o.cost = flop_cost_model(dims);
    o.policy.enabled = true;
    o.policy.min_tokens = 0;
    o.policy.min_frames = 0;
    for (Partitioner p : all_partitioners()) {
      o.partitioner = p;
      measure(make_plan(wl.workload.grid, o));
    }
    o.partitioner = Partitioner::kOptimal;
    o.split.enabled = true;
    o.split.window_side = models::split_window_side(m.config);
    measure(make_plan(wl.workload.grid, o));
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "Scale simulation: each CP rank's share of the vision work, "
      "timed one rank after another"};
  app.add_option("--family", a.family)
      ->check(CLI::IsMember(cli::timing_tower_families()))
      ->capture_default_str();
  app.add_option("--width", a.width)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--depth", a.depth)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--preset", a.presets, "doc, multi, video, mixed")
      ->capture_default_str();
  app.add_option("--scale", a.scale, "h and w divided by S (0: automatic)");
  app.add_option(
         "--max-patches",
         a.max_patches,
         "Automatic scale: total patch rows at most")
      ->capture_default_str();
  app.add_option("--cp", a.cps, "CP sizes")->capture_default_str();
  app.add_option(
         "--bandwidth-gbps",
         a.bandwidth_gbps,
         "Gather model: GB/s into the slowest receiving rank")
      ->capture_default_str();
  app.add_option("--repeats", a.repeats)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench::MeshSimArgs mesh;
  app.add_option(
         "--mesh-dp", mesh.dp, "Mesh mode: DP replicas (scale_sim_mesh.h)")
      ->check(CLI::PositiveNumber);
  app.add_option("--manifest", mesh.manifests, "Mesh mode: JSONL manifests")
      ->check(CLI::ExistingFile);
  app.add_option("--samples-per-replica", mesh.samples_per_replica)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", mesh.steps, "Mesh mode: steps per manifest")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag(
      "--split-frames", mesh.split, "Mesh mode: both plans may cut frames");
  app.add_flag(
      "--auto",
      mesh.choose,
      "Mesh mode: policy auto's per-step choice of mesh or CP-only");
  app.add_option(
      "--cost-alpha",
      mesh.cost_alpha,
      "Mesh mode: cost_alpha of both plans (e.g. a calibrate file)");
  app.add_option("--mesh-min-gain", mesh.min_gain, "Mesh mode with --auto")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(1);
  torch::manual_seed(0);
  const models::QwenVisionModel m =
      cli::make_timing_tower({a.family, a.width, a.depth, ""});
  if (app.count("--mesh-dp") > 0) {
    mesh.family = a.family;
    mesh.cp = a.cps.size() == 1 ? a.cps[0] : 8;
    mesh.scale = a.scale > 0 ? a.scale : 4;
    mesh.bandwidth_gbps = a.bandwidth_gbps;
    mesh.repeats = a.repeats;
    bench::simulate_mesh(mesh, m);
    return 0;
  }
  std::printf(
      "scale simulation: %s width %lld depth %lld, 1 thread per "
      "rank, gather and K/V exchange at %.0f GB/s; speedup = replicated / "
      "(slowest rank + its exchange + gather), imbal = slowest / mean rank, "
      "sum/rep = sum of "
      "the rank times / replicated\n",
      a.family.c_str(),
      static_cast<long long>(a.width),
      static_cast<long long>(a.depth),
      a.bandwidth_gbps);
  for (const auto& p : a.presets) {
    simulate_preset(a, p, m);
  }
  return 0;
}
