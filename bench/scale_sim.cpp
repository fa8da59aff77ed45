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
// The arm `split` is the optimal partitioner with split_frames: a piece
// runs its queries against its whole frame (tools/tower_timing.h's
// standin_exchange pads its keys to the frame), and the K/V rows it would
// receive are added to its time at the same bandwidth. With --cost-alpha
// FILE (a `frameshard calibrate` file) every arm is planned a second time
// with that cost. The per-rank mode is scale_sim_shares.h.
//
// Batches: --preset (the core's presets), --workload (JSON files of
// grid_thw), --manifest (the first --samples samples of a JSONL manifest
// under the --family processor rule); each scaled by --scale. --device
// cuda times on GPU 0 (synchronised wall time), --dtype bfloat16 in bf16,
// --width 0 is the family's released width, --json FILE writes every
// figure. The tower and the timing are tools/tower_timing.h's, shared with
// `frameshard calibrate`.
//
// --mesh-dp D (with --manifest files and one --cp C): the mesh mode of
// scale_sim_mesh.h instead, D replicas of real manifest batches under
// mesh_dims [cp] and [dp, cp], the step-level vision bottleneck of each.
//
// Usage: frameshard_scale_sim [--family qwen3-vl] [--width 256] [--depth 2]
//          [--preset mixed ...] [--workload F.json ...] [--manifest M.jsonl
//          ... --samples 8] [--scale 0] [--max-patches 8192]
//          [--cp 2 --cp 4 ...] [--bandwidth-gbps 25] [--repeats 1]
//          [--device cpu|cuda] [--dtype float32|bfloat16]
//          [--cost-alpha cal.txt] [--online-rounds 6] [--json out.json]
//        frameshard_scale_sim --mesh-dp 8 --cp 8 --manifest M.jsonl ...
//          [--samples-per-replica 2] [--steps 3] [--scale 4]
#include <frameshard/error.h>
#include <frameshard/models/cost_bridge.h>
#include <frameshard/workload.h>

#include "dtype_option.h"
#include "manifest_batch.h"
#include "scale_sim_mesh.h"
#include "scale_sim_shares.h"
#include "tower_timing.h"
#include "verify_workload.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace frameshard;

struct Args {
  cli::TowerSpec tower;  // qwen3-vl, width 256, depth 2
  std::string dtype = "float32";
  std::vector<std::string> presets;
  std::vector<std::string> workloads;
  std::vector<std::string> manifests;
  int64_t samples = 8;
  int64_t scale = 0;
  int64_t max_patches = 8192;
  std::vector<int64_t> cps{2, 4, 8, 16, 32, 64};
  double bandwidth_gbps = 25.0;
  int repeats = 1;
  std::string cost_alpha;
  int online_rounds = 0;
  std::string json;
};

struct Batch {
  std::string label;
  std::vector<GridThw> grid;
};

// The presets and workload files (resolve_workload's scaling), then the
// manifests' first samples (scaled by --scale, or 4 when it is 0).
std::vector<Batch> batches(const Args& a) {
  std::vector<Batch> out;
  auto add = [&](cli::WorkloadRequest req) {
    req.scale = a.scale;
    req.max_patches = a.max_patches;
    const cli::ResolvedWorkload wl = cli::resolve_workload(req);
    out.push_back({wl.display_label(), wl.workload.grid});
  };
  for (const std::string& p : a.presets) {
    cli::WorkloadRequest req;
    req.preset = p;
    add(req);
  }
  for (const std::string& f : a.workloads) {
    cli::WorkloadRequest req;
    req.file = f;
    add(req);
  }
  for (const std::string& f : a.manifests) {
    const cli::ManifestBatch b =
        cli::load_manifest_batch(f, a.tower.family, 0, a.samples);
    const int64_t s = a.scale > 0 ? a.scale : 4;
    out.push_back(
        {cli::manifest_origin(b) + ", h and w / " + std::to_string(s),
         scale_workload(b.workload, s).grid});
  }
  if (out.empty()) {
    cli::WorkloadRequest req;
    req.preset = "mixed";
    add(req);
  }
  return out;
}

void run_shares(const Args& a, const models::QwenVisionModel& m) {
  bench::SharesRequest req;
  req.cps = a.cps;
  req.bandwidth_gbps = a.bandwidth_gbps;
  req.repeats = a.repeats;
  req.cost_alpha = a.cost_alpha;
  req.online_rounds = a.online_rounds;
  std::printf(
      "scale simulation: %s width %lld depth %lld, %s on %s, one rank's "
      "share at a time, gather and K/V exchange at %.0f GB/s; speedup = "
      "replicated / (slowest rank + its exchange + gather), imbal = slowest "
      "/ mean rank, sum/rep = sum of the rank times / replicated\n",
      models::tower_dims(m.config).name.c_str(),
      static_cast<long long>(models::tower_dims(m.config).hidden),
      static_cast<long long>(models::tower_dims(m.config).depth),
      cli::timing_dtype_name(m).c_str(),
      cli::timing_device_name(m).c_str(),
      a.bandwidth_gbps);
  nlohmann::json j = {
      {"family", a.tower.family},
      {"width", models::tower_dims(m.config).hidden},
      {"depth", models::tower_dims(m.config).depth},
      {"device", cli::timing_device_name(m)},
      {"dtype", cli::timing_dtype_name(m)},
      {"bandwidth_gbps", a.bandwidth_gbps},
      {"calibration", a.cost_alpha},
      {"batches", nlohmann::json::array()}};
  for (const Batch& b : batches(a)) {
    j["batches"].push_back(bench::simulate_shares(req, b.label, b.grid, m));
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    FRAMESHARD_CHECK(
        f.good(),
        "scale_sim",
        "--json: expected a writable file, got \"",
        a.json,
        "\"");
    f << j.dump(1) << "\n";
  }
}

}  // namespace

namespace {

void add_options(CLI::App& app, Args& a, bench::MeshSimArgs& mesh) {
  app.add_option("--family", a.tower.family)
      ->check(CLI::IsMember(cli::timing_tower_families()))
      ->capture_default_str();
  app.add_option("--width", a.tower.width, "0: the released width")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--depth", a.tower.depth)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--device", a.tower.device)
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--dtype", a.dtype)
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  app.add_option("--preset", a.presets, "doc, multi, video, mixed");
  app.add_option("--workload", a.workloads, "JSON workload files (grid_thw)")
      ->check(CLI::ExistingFile);
  app.add_option("--manifest", a.manifests, "JSONL manifests")
      ->check(CLI::ExistingFile);
  app.add_option("--samples", a.samples, "Per-rank mode: manifest samples")
      ->check(CLI::PositiveNumber)
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
  app.add_option(
      "--cost-alpha",
      a.cost_alpha,
      "A calibrate file: per-rank mode, a second set of plans with it; mesh "
      "mode, cost_alpha of both plans");
  app.add_option(
         "--online-rounds",
         a.online_rounds,
         "Per-rank mode: a split arm under cost_alpha online, learned over N "
         "rounds of this batch's timed shares")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", a.json, "Per-rank mode: write every figure");
  app.add_option(
         "--mesh-dp", mesh.dp, "Mesh mode: DP replicas (scale_sim_mesh.h)")
      ->check(CLI::PositiveNumber);
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
  app.add_option("--mesh-min-gain", mesh.min_gain, "Mesh mode with --auto")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  bench::MeshSimArgs mesh;
  CLI::App app{
      "Scale simulation: each CP rank's share of the vision work, "
      "timed one rank after another"};
  add_options(app, a, mesh);
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(1);
    torch::manual_seed(0);
    a.tower.dtype = cli::parse_dtype_option(
        a.dtype, "scale_sim", {at::kFloat, at::kBFloat16});
    const models::QwenVisionModel m = cli::make_timing_tower(a.tower);
    if (app.count("--mesh-dp") == 0) {
      run_shares(a, m);
      return 0;
    }
    mesh.family = a.tower.family;
    mesh.manifests = a.manifests;
    mesh.cost_alpha = a.cost_alpha;
    mesh.cp = a.cps.size() == 1 ? a.cps[0] : 8;
    mesh.scale = a.scale > 0 ? a.scale : 4;
    mesh.bandwidth_gbps = a.bandwidth_gbps;
    mesh.repeats = a.repeats;
    mesh.cpu_clock = a.tower.device == "cpu";
    bench::simulate_mesh(mesh, m);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frameshard_scale_sim: %s\n", e.what());
    return 2;
  }
}
