// Vision A/B: one reference tower (random weights at a realistic width),
// forward + backward, sharded (frameshard::encode over `world` ranks) against
// replicated (every rank runs the tower on every frame, as without
// frameshard), measured in one run; and the gather alone, unpadded
// (all_gather_rows) against the padded equal-size all-gather.
//
// Ranks are threads of this process (tests/testing/run_ranks.h): on the CPU
// with Gloo, one torch thread per rank (so 2 ranks on 2 cores are not
// oversubscribed); with --device cuda, rank r on GPU r with NCCL when there
// are `world` GPUs, else every rank on GPU 0 with Gloo staging CUDA tensors
// through host memory (NCCL refuses two ranks on one GPU; the tower times
// then share one GPU and are upper bounds for the sharded arm).
//
// Usage:
//   frameshard_vision_ab [--family qwen2-vl|qwen2.5-vl|qwen3-vl] [--depth 4]
//       [--width 0] (0: the released width; else tools/tower_timing.h's
//       small tower of that width)
//       [--preset mixed|doc|video|multi] [--seed 0] [--scale 0]
//       [--workload FILE.json] [--split-frames]
//       [--world 2] [--device cpu|cuda] [--dtype float32|bfloat16]
//       [--repeats 3] [--warmup 1]
// Prints a table, then one JSON line (`json: {...}`) with every figure:
// per arm the step times (max over ranks, ms), peak allocated bytes per rank
// (CUDA only), and the ratios sharded / replicated.

#include <frameshard/models/cost_bridge.h>
#include <frameshard/models/qwen_factory.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/gather.h>

#include "bench_options.h"
#include "testing/run_ranks.h"
#include "tower_timing.h"
#include "verify_workload.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#ifdef FRAMESHARD_WITH_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace frameshard {
namespace {

struct Args {
  std::string family = "qwen2-vl";
  int64_t depth = 4;
  int64_t width = 0;  // 0: the released width
  cli::WorkloadRequest workload;
  int world = 2;
  bool split_frames = false;
  bench::TimingOptions timing{"bfloat16"};
};

Args parse(int argc, char** argv) {
  Args a;
  a.workload.preset = "mixed";
  a.workload.max_patches = 24576;
  CLI::App app{"Vision A/B: sharded vs replicated tower, and the gather."};
  app.add_option("--family", a.family)
      ->check(CLI::IsMember({"qwen2-vl", "qwen2.5-vl", "qwen3-vl"}));
  app.add_option("--depth", a.depth)->check(CLI::PositiveNumber);
  app.add_option("--width", a.width, "Tower width (0: the released one)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--preset", a.workload.preset);
  app.add_option("--workload", a.workload.file, "JSON workload (grid_thw)");
  app.add_flag(
      "--split-frames", a.split_frames, "Cut frames across ranks (split)");
  app.add_option("--seed", a.workload.seed);
  app.add_option("--scale", a.workload.scale)->check(CLI::NonNegativeNumber);
  app.add_option("--world", a.world)->check(CLI::PositiveNumber);
  bench::add_timing_options(app, a.timing);
  bench::parse_or_exit(app, argc, argv);
  return a;
}

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

/// Max over ranks of a per-rank value (each rank passes its own).
double max_over_ranks(const ProcessGroupPtr& pg, double v) {
  std::vector<at::Tensor> t{at::full({1}, v, at::kDouble)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  pg->allreduce(t, o)->wait();
  return t[0].item<double>();
}

struct Arm {
  std::vector<double> step_ms;         // max over ranks, per timed repeat
  int64_t peak_bytes = 0;              // max over ranks (CUDA), else 0
  int64_t bytes_sent = 0;              // rank 0's forward gather payload
  std::vector<int64_t> gather_counts;  // rows per rank (sharded plan)
  bool split = false;                  // the plan cut a frame across ranks
  int64_t exchange_rows = 0;  // K/V rows rank 0 receives per full layer
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace
}  // namespace frameshard

namespace frameshard {
namespace {

#ifdef FRAMESHARD_WITH_NCCL
int64_t cuda_peak_bytes(c10::Device d) {
  if (!d.is_cuda()) {
    return 0;
  }
  return c10::cuda::CUDACachingAllocator::getDeviceStats(d.index())
      .allocated_bytes[0]
      .peak;
}
void reset_cuda_peak(c10::Device d) {
  if (d.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
  }
}
#else
int64_t cuda_peak_bytes(c10::Device) {
  return 0;
}
void reset_cuda_peak(c10::Device) {}
#endif

void sync(c10::Device d) {
  if (d.is_cuda()) {
    torch::cuda::synchronize(d.index());
  }
}

struct RankWork {
  const Args* args;
  models::QwenVisionModel model;
  at::Tensor grid;
  PlanOptions plan;
};

/// One arm on one rank: warmup + repeats of encode + backward.
Arm run_arm(
    RankWork& w,
    bool sharded,
    const ProcessGroupPtr& pg,
    c10::Device dev,
    const at::Tensor& pixels) {
  EncodeOptions eo;
  eo.plan = w.plan;
  eo.plan.policy.enabled = sharded;
  Arm arm;
  for (int i = 0; i < w.args->timing.warmup + w.args->timing.repeats; ++i) {
    pg->barrier()->wait();
    reset_cuda_peak(dev);
    const auto t0 = std::chrono::steady_clock::now();
    EncodeResult res = encode(w.model.tower, pixels, w.grid, pg, eo);
    at::Tensor loss = at::zeros({}, at::kFloat).to(dev);
    for (const auto& o : res.outputs) {
      loss = loss + o.to(at::kFloat).square().mean();
    }
    loss.backward();
    sync(dev);
    const double ms = max_over_ranks(pg, elapsed_ms(t0));
    w.model.module->zero_grad();
    if (i >= w.args->timing.warmup) {
      arm.step_ms.push_back(ms);
    }
    arm.peak_bytes = std::max<int64_t>(
        arm.peak_bytes,
        static_cast<int64_t>(
            max_over_ranks(pg, static_cast<double>(cuda_peak_bytes(dev)))));
    arm.bytes_sent = res.bytes_sent;
    arm.gather_counts = res.plan.gather_counts;
    arm.split = res.plan.split;
    arm.exchange_rows = res.plan.ranks[0].exchange_rows;
  }
  return arm;
}

/// The gather alone on `counts` rows of `width` values: unpadded vs padded.
std::pair<double, double> time_gather(
    const std::vector<int64_t>& counts,
    int64_t width,
    at::ScalarType dtype,
    int rank,
    const ProcessGroupPtr& pg,
    c10::Device dev,
    int repeats) {
  const int64_t mine = counts[rank];
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  at::Tensor local = at::randn({mine, width}).to(dtype).to(dev);
  std::vector<double> unpadded, padded;
  for (int i = 0; i < repeats + 1; ++i) {
    pg->barrier()->wait();
    auto t0 = std::chrono::steady_clock::now();
    at::Tensor all = all_gather_rows(local, counts, pg);
    sync(dev);
    const double u = max_over_ranks(pg, elapsed_ms(t0));
    pg->barrier()->wait();
    t0 = std::chrono::steady_clock::now();
    at::Tensor pad = at::zeros({most, width}, local.options());
    pad.narrow(0, 0, mine).copy_(local);
    std::vector<std::vector<at::Tensor>> out(1);
    for (size_t r = 0; r < counts.size(); ++r) {
      out[0].push_back(at::empty_like(pad));
    }
    std::vector<at::Tensor> in{pad};
    pg->allgather(out, in)->wait();
    std::vector<at::Tensor> parts;
    for (size_t r = 0; r < counts.size(); ++r) {
      parts.push_back(out[0][r].narrow(0, 0, counts[r]));
    }
    at::Tensor cat = at::cat(parts, 0);
    sync(dev);
    const double p = max_over_ranks(pg, elapsed_ms(t0));
    if (i > 0) {
      unpadded.push_back(u);
      padded.push_back(p);
    }
  }
  return {median(unpadded), median(padded)};
}

nlohmann::json arm_json(const Arm& a) {
  return {
      {"step_ms", a.step_ms},
      {"median_step_ms", median(a.step_ms)},
      {"peak_allocated_bytes", a.peak_bytes},
      {"bytes_sent_rank0", a.bytes_sent}};
}

int run(const Args& a) {
  const cli::ResolvedWorkload wl = cli::resolve_workload(a.workload);
  const models::QwenVisionConfig cfg =
      a.width > 0 ? cli::small_tower_config(a.family, a.width, a.depth)
                  : cli::released_tower_config(a.family, a.depth);
  const at::ScalarType dtype =
      a.timing.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  if (a.timing.device == "cpu") {
    at::set_num_threads(1);  // one core per rank
  }
  std::vector<RankWork> work(a.world);
  torch::manual_seed(a.workload.seed);
  const FrameSet frames =
      expand_frames(wl.workload.grid, models::media_layout(cfg));
  at::Tensor pixels =
      at::randn({frames.total_patch_rows, cfg.in_features()}).to(dtype);
  for (int r = 0; r < a.world; ++r) {
    torch::manual_seed(a.workload.seed + 1);
    work[r].args = &a;
    work[r].model = models::make_qwen_vision(cfg);
    work[r].model.module->to(dtype);
    work[r].grid = grid_to_tensor(wl.workload.grid);
    work[r].plan.world = a.world;
    work[r].plan.layout = models::media_layout(cfg);
    work[r].plan.cost = flop_cost_model(models::tower_dims(cfg));
    work[r].plan.split.enabled = a.split_frames;
    work[r].plan.split.window_side = models::split_window_side(cfg);
    work[r].plan.policy.min_tokens = 0;
    work[r].plan.policy.min_frames = 0;
  }
  Arm replicated, sharded;
  std::pair<double, double> gather{0, 0};
  std::vector<int64_t> counts;
  testing::RunRanksOptions ro;
  ro.device = a.timing.device;
  ro.timeout = std::chrono::minutes(10);
  ro.hang_limit = std::chrono::minutes(30);
  testing::run_ranks(
      a.world,
      [&](int rank, ProcessGroupPtr pg) {
        const c10::Device dev = a.timing.device == "cuda"
                                    ? testing::cuda_rank_device(rank, a.world)
                                    : c10::Device(c10::kCPU);
        RankWork& w = work[rank];
        w.model.module->to(dev);
        const at::Tensor px = pixels.to(dev);
        Arm rep = run_arm(w, false, pg, dev, px);
        Arm sh = run_arm(w, true, pg, dev, px);
        // The gather alone, on the rows the sharded plan gathered.
        const std::vector<int64_t>& c = sh.gather_counts;
        auto g = time_gather(
            c, cfg.out_hidden_size(), dtype, rank, pg, dev, a.timing.repeats);
        if (rank == 0) {
          replicated = rep;
          sharded = sh;
          gather = g;
          counts = c;
        }
      },
      ro);

  const double rep_ms = median(replicated.step_ms);
  const double sh_ms = median(sharded.step_ms);
  int64_t total = 0;
  for (int64_t c : counts) {
    total += c;
  }
  const double payload = static_cast<double>(total) *
                         static_cast<double>(cfg.out_hidden_size()) *
                         static_cast<double>(at::elementSize(dtype));
  std::printf(
      "vision A/B: %s, width %lld, depth %lld, %s on %s, world %d, %s: %lld "
      "patch rows, %lld tokens\n",
      a.family.c_str(),
      static_cast<long long>(models::tower_dims(cfg).hidden),
      static_cast<long long>(a.depth),
      a.timing.dtype.c_str(),
      a.timing.device.c_str(),
      a.world,
      wl.display_label().c_str(),
      static_cast<long long>(frames.total_patch_rows),
      static_cast<long long>(frames.total_tokens));
  std::printf(
      "  tower forward+backward (max over ranks, median of %d):\n"
      "    replicated %10.1f ms   sharded %10.1f ms   ratio %.3f%s\n",
      a.timing.repeats,
      rep_ms,
      sh_ms,
      sh_ms / rep_ms,
      sharded.split ? "   (frames split across ranks)" : "");
  if (a.timing.device == "cuda") {
    std::printf(
        "    peak allocated per rank: replicated %.1f MiB, sharded %.1f MiB, "
        "ratio %.3f\n",
        replicated.peak_bytes / 1048576.0,
        sharded.peak_bytes / 1048576.0,
        static_cast<double>(sharded.peak_bytes) /
            static_cast<double>(std::max<int64_t>(replicated.peak_bytes, 1)));
  }
  std::printf(
      "  gather of %lld tokens x %lld: unpadded %.3f ms (%.2f GB/s of "
      "payload), padded all-gather %.3f ms, padded/unpadded %.2f\n",
      static_cast<long long>(total),
      static_cast<long long>(cfg.out_hidden_size()),
      gather.first,
      payload / (gather.first * 1e6),
      gather.second,
      gather.second / gather.first);
  nlohmann::json j = {
      {"family", a.family},
      {"depth", a.depth},
      {"width", models::tower_dims(cfg).hidden},
      {"dtype", a.timing.dtype},
      {"device", a.timing.device},
      {"world", a.world},
      {"workload", wl.display_label()},
      {"patch_rows", frames.total_patch_rows},
      {"tokens", frames.total_tokens},
      {"replicated", arm_json(replicated)},
      {"sharded", arm_json(sharded)},
      {"vision_time_ratio", sh_ms / rep_ms},
      {"split", sharded.split},
      {"exchange_rows_rank0", sharded.exchange_rows},
      {"gather_counts", counts},
      {"gather_unpadded_ms", gather.first},
      {"gather_padded_ms", gather.second},
  };
  std::cout << "json: " << j.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace frameshard

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return frameshard::run(frameshard::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frameshard_vision_ab: %s\n", e.what());
    return 2;
  }
}
