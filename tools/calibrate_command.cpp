// `frameshard calibrate`: time the reference tower on single frames of a
// sweep of sizes, fit cost(p) = a*p^2 + b*p + c (frameshard/calibrate.h),
// print the fit error per size and write the calibration file the config's
// cost_alpha accepts; with --check, compare predicted and measured per-rank
// time on the presets (tools/calibrate_check.h).
//
//   frameshard calibrate --family qwen3-vl --width 256 --depth 2
//       --out cal.txt --check  (one line)
//   # then in the YAML: cost_alpha: cal.txt
#include "calibrate_check.h"
#include "commands.h"
#include "dtype_option.h"
#include "tower_timing.h"

#include <frameshard/calibrate.h>
#include <frameshard/error.h>
#include <frameshard/models/cost_bridge.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

struct CalibrateArgs {
  TowerSpec tower;
  bool forward_only = false;
  std::vector<int64_t> sizes{64, 144, 256, 576, 1024, 2304, 4096};
  int repeats = 3;
  int threads = 1;
  std::string clock = "auto";  // cpu on the CPU, wall on a GPU
  std::string dtype = "float32";
  std::string out = "calibration.txt";
  std::string json;  // --json: the figures, machine-readable
  bool check = false;
  CheckRequest request;
};

// A single frame of p patch rows with merge-aligned sides, as square as
// possible: 1024 -> (1, 32, 32), 2048 -> (1, 32, 64).
GridThw frame_of(int64_t p, int64_t merge) {
  for (auto h = static_cast<int64_t>(std::sqrt(static_cast<double>(p)));
       h >= merge;
       --h) {
    if (h % merge == 0 && p % h == 0 && (p / h) % merge == 0) {
      return {1, h, p / h};
    }
  }
  detail::fail(
      "calibrate",
      "--sizes: expected patch rows h*w with h and w multiples of ",
      merge,
      ", got ",
      p);
}

// Single frames of every size, calls of 4 frames of every size up to a
// quarter of the largest and one call of 16 frames of the smallest: calls
// of several frames, as a rank makes, separate the per-call constant from
// the per-frame one (frameshard/calibrate.h).
std::vector<TimingSample> sweep(std::vector<int64_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  std::vector<TimingSample> out;
  for (int64_t p : sizes) {
    out.push_back({p, 0.0, 1});
  }
  for (int64_t p : sizes) {
    if (p == sizes.front() || 4 * p <= sizes.back()) {
      out.push_back({p, 0.0, 4});
    }
  }
  out.push_back({sizes.front(), 0.0, 16});
  return out;
}

std::string describe(const CalibrateArgs& a, const models::QwenVisionModel& m) {
  std::ostringstream os;
  if (a.tower.model_dir.empty()) {
    os << a.tower.family << " width " << a.tower.width << " depth "
       << a.tower.depth << " (random weights)";
  } else {
    os << a.tower.model_dir << " (" << models::tower_dims(m.config).name << ")";
  }
  os << ", " << (a.forward_only ? "forward only" : "forward + backward") << ", "
     << timing_dtype_name(m) << " on " << timing_device_name(m) << ", "
     << a.threads << " CPU thread(s), " << (a.clock == "cpu" ? "CPU" : "wall")
     << " clock, median of " << a.repeats;
  return os.str();
}

// Times the sweep (tools/tower_timing.h), one warm-up call per sample.
std::vector<TimingSample> time_sweep(
    const CalibrateArgs& a,
    const models::QwenVisionModel& m,
    const TimingRun& run) {
  const int64_t merge = m.config.spatial_merge_size();
  std::vector<TimingSample> samples;
  for (const TimingSample& want : sweep(a.sizes)) {
    GridThw g = frame_of(want.patch_rows, merge);
    g.t = want.frames;
    const TowerInput in = whole_frames_input(random_pixels(m, {g}), {g});
    time_tower(m, in, {1, a.forward_only, false});  // warm-up
    samples.push_back({want.patch_rows, time_tower(m, in, run), want.frames});
  }
  return samples;
}

// The fit error per sample next to the FLOP model's, whose shape is
// scaled to seconds by least squares to show how far its relative costs
// are from the measured ones.
std::string fit_report(
    const std::string& header,
    const std::vector<TimingSample>& samples,
    const QuadraticFit& fit,
    const CostModel& flop) {
  double num = 0.0, den = 0.0;
  for (const TimingSample& s : samples) {
    const double r =
        static_cast<double>(s.frames) * flop(s.patch_rows) / s.seconds;
    num += r;
    den += r * r;
  }
  const double flop_scale = num / den;
  std::ostringstream report;
  report << "frameshard calibrate: " << header << "\n";
  report << "a call on k frames of p patch rows takes per_call + k * cost(p), "
            "cost(p) = a*p^2 + b*p + c seconds\n";
  report << "fit error per size (predicted / measured - 1; the FLOP model "
         << flop.label << " scaled to seconds for comparison):\n";
  char line[160];
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const TimingSample& s = samples[i];
    const double k = static_cast<double>(s.frames);
    std::snprintf(
        line,
        sizeof(line),
        "  p %5lld x %2lld  measured %9.3f ms  fit %+6.1f%%  FLOP %+6.1f%%\n",
        static_cast<long long>(s.patch_rows),
        static_cast<long long>(s.frames),
        s.seconds * 1e3,
        fit.relative_errors[i] * 100.0,
        (flop_scale * k * flop(s.patch_rows) / s.seconds - 1.0) * 100.0);
    report << line;
  }
  std::snprintf(
      line,
      sizeof(line),
      "fit error: max %.1f%%, rms %.1f%%; b/a = %.0f patches; per call "
      "%.3f ms\n",
      fit.max_relative_error * 100.0,
      fit.rms_relative_error * 100.0,
      fit.model.a > 0.0 ? fit.model.b / fit.model.a : INFINITY,
      fit.per_call * 1e3);
  report << line;
  return report.str();
}

// --json: the fit, its samples and the check's summary, for scripts
// (scripts/gpu-check.sh).
void write_json(
    const CalibrateArgs& a,
    const models::QwenVisionModel& m,
    const std::vector<TimingSample>& samples,
    const QuadraticFit& fit,
    const CheckSummary* check) {
  nlohmann::json j = {
      {"device", timing_device_name(m)},
      {"dtype", timing_dtype_name(m)},
      {"tower", models::tower_dims(m.config).name},
      {"width", models::tower_dims(m.config).hidden},
      {"depth", models::tower_dims(m.config).depth},
      {"clock", a.clock},
      {"a", fit.model.a},
      {"b", fit.model.b},
      {"c", fit.model.c},
      {"per_call_s", fit.per_call},
      {"fit_max_error", fit.max_relative_error},
      {"fit_rms_error", fit.rms_relative_error},
      {"calibration_file", a.out}};
  for (const TimingSample& s : samples) {
    j["samples"].push_back(
        {{"patch_rows", s.patch_rows},
         {"frames", s.frames},
         {"seconds", s.seconds}});
  }
  if (check != nullptr) {
    j["check"] = {
        {"max_abs_error", check->max_abs_error},
        {"mean_abs_error", check->mean_abs_error},
        {"plans_not_worse", check->plans_not_worse},
        {"plans", check->plans}};
  }
  std::ofstream f(a.json);
  FRAMESHARD_CHECK(
      f.good(),
      "calibrate",
      "--json: expected a writable file, got \"",
      a.json,
      "\"");
  f << j.dump(1) << "\n";
}

void run_calibrate(CalibrateArgs a) {
  a.tower.dtype =
      parse_dtype_option(a.dtype, "calibrate", {at::kFloat, at::kBFloat16});
  if (a.clock == "auto") {
    a.clock = a.tower.device == "cuda" ? "wall" : "cpu";
  }
  at::set_num_threads(a.threads);
  torch::manual_seed(0);
  const models::QwenVisionModel m = make_timing_tower(a.tower);
  const TimingRun run{a.repeats, a.forward_only, a.clock == "cpu"};
  const std::vector<TimingSample> samples = time_sweep(a, m, run);
  const QuadraticFit fit = fit_quadratic(samples);
  const CostModel flop = flop_cost_model(models::tower_dims(m.config));
  const std::string report = fit_report(describe(a, m), samples, fit, flop);
  std::fputs(report.c_str(), stdout);

  std::ofstream out(a.out);
  FRAMESHARD_CHECK(
      out.good(),
      "calibrate",
      "--out: expected a writable file, got \"",
      a.out,
      "\"");
  out << calibration_text(fit.model, report.substr(0, report.size() - 1));
  out.close();
  std::printf("wrote %s: %s\n", a.out.c_str(), fit.model.label.c_str());
  std::fflush(stdout);

  CheckSummary check;
  if (a.check) {
    CheckRequest req = a.request;
    req.run = run;
    req.per_call = fit.per_call;
    check =
        run_calibration_check(m, read_calibration(a.out, "--out"), flop, req);
  }
  if (!a.json.empty()) {
    write_json(a, m, samples, fit, a.check ? &check : nullptr);
  }
}

}  // namespace

void register_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Time the vision tower on a sweep of frame sizes and fit the cost "
      "model a*p^2 + b*p + c (seconds) for cost_alpha");
  cmd->add_option("--family", args->tower.family, "Reference tower family")
      ->check(CLI::IsMember(timing_tower_families()))
      ->capture_default_str();
  cmd->add_option("--width", args->tower.width, "Tower width (0: released)")
      ->check(CLI::Range(int64_t{0}, int64_t{8192}))
      ->capture_default_str();
  cmd->add_option("--depth", args->tower.depth, "Tower layers")
      ->check(CLI::Range(int64_t{1}, int64_t{128}))
      ->capture_default_str();
  cmd->add_option(
      "--model-dir",
      args->tower.model_dir,
      "Hugging Face checkpoint (instead of --family/--width/--depth)");
  cmd->add_flag(
      "--forward-only",
      args->forward_only,
      "Time forward only (a frozen tower)");
  cmd->add_option("--sizes", args->sizes, "Patch rows per frame")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 20))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "Timed runs per size (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Torch CPU threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option(
         "--clock",
         args->clock,
         "cpu: process CPU time (robust on a shared machine); wall: elapsed; "
         "auto: cpu on the CPU, wall on a GPU")
      ->check(CLI::IsMember({"auto", "cpu", "wall"}))
      ->capture_default_str();
  cmd->add_option("--device", args->tower.device, "Where the tower runs")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "The tower's dtype")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Calibration file to write")
      ->capture_default_str();
  cmd->add_option("--json", args->json, "Also write the figures as JSON");
  cmd->add_flag(
      "--check",
      args->check,
      "Then compare predicted and measured per-rank time on the presets");
  cmd->add_option("--preset", args->request.presets, "--check: presets")
      ->capture_default_str();
  cmd->add_option("--cp", args->request.cps, "--check: CP sizes")
      ->check(CLI::Range(int64_t{1}, int64_t{64}))
      ->capture_default_str();
  cmd->add_option(
         "--max-patches",
         args->request.max_patches,
         "--check: scale each preset to at most this many patch rows")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([args] {
    // The presets' frames stay inside the calibrated sizes.
    args->request.max_frame_patches = 0;
    for (int64_t p : args->sizes) {
      args->request.max_frame_patches =
          std::max(args->request.max_frame_patches, p);
    }
    run_calibrate(*args);
  });
}

}  // namespace cli
}  // namespace frameshard
