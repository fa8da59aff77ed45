// File: bench/gather_bench.cpp
//
// The unpadded variable-size gather (frameshard::all_gather_rows:
// alltoall_base with split sizes) against what NeMo Automodel does: pad every
// rank's rows to the largest count and run an equal-size all_gather, then
// cut the padding off. Per-rank row counts come from real plans of the
// workload presets (frameshard::preset_workload, seed 0, optimal partition)
// for world 2 to 4; each row is `hidden` floats (FRAMESHARD_BENCH_HIDDEN,
// default 2048, a post-projector width).
//
// Ranks are threads of this process, each with its own Gloo group on
// loopback; rank 0 is the benchmark thread. These CPU/Gloo figures measure
// software overhead and memory traffic on one machine only (the "wire" is
// loopback TCP and every rank shares the same cores): they are not network
// or NCCL numbers. The byte counters are exact per the algorithm:
//   MB_sent_per_rank  mean payload one rank sends to its peers per gather;
//   bytes_ratio       padded / unpadded bytes on the wire, summed over ranks
//                     (= max count * world / total rows; same in both rows).
//
// Run: build/bench/frameshard_gather_bench [--benchmark_filter=mixed]

#include <frameshard/plan.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/workload.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using frameshard::ProcessGroupPtr;

enum class Mode { kUnpadded, kPadded };

int64_t hidden_size() {
  const char* env = std::getenv("FRAMESHARD_BENCH_HIDDEN");
  const int64_t h = env ? std::atoll(env) : 2048;
  return h > 0 ? h : 2048;
}

std::vector<int64_t> preset_counts(const std::string& preset, int world) {
  const auto wl = frameshard::preset_workload(preset, 0);
  frameshard::PlanOptions o;
  o.world = world;
  o.layout = wl.layout;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  return frameshard::make_plan(wl.grid, o).gather_counts;
}

/// Automodel's way: pad to the largest count, equal-size all_gather, cut.
at::Tensor padded_allgather(
    const at::Tensor& local,
    const std::vector<int64_t>& counts,
    const ProcessGroupPtr& pg) {
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  at::Tensor padded = at::zeros({largest, local.size(1)}, local.options());
  padded.narrow(0, 0, local.size(0)).copy_(local);
  std::vector<std::vector<at::Tensor>> out(1);
  for (size_t r = 0; r < counts.size(); ++r) {
    out[0].push_back(at::empty_like(padded));
  }
  std::vector<at::Tensor> in{padded};
  pg->allgather(out, in)->wait();
  std::vector<at::Tensor> parts;
  for (size_t r = 0; r < counts.size(); ++r) {
    parts.push_back(out[0][r].narrow(0, 0, counts[r]));
  }
  return at::cat(parts, 0);
}

at::Tensor gather_once(
    Mode mode,
    const at::Tensor& local,
    const std::vector<int64_t>& counts,
    const ProcessGroupPtr& pg) {
  return mode == Mode::kUnpadded
             ? frameshard::all_gather_rows(local, counts, pg)
             : padded_allgather(local, counts, pg);
}

void BM_Gather(benchmark::State& state, const std::string& preset, Mode mode) {
  const int world = static_cast<int>(state.range(0));
  const int64_t hidden = hidden_size();
  const auto counts = preset_counts(preset, world);
  const int64_t iterations = static_cast<int64_t>(state.max_iterations);

  auto store = c10::make_intrusive<c10d::HashStore>();
  frameshard::GroupOptions go;
  go.timeout = std::chrono::seconds(120);
  go.threads = 1;
  std::vector<std::thread> helpers;
  std::vector<std::string> errors(world);
  for (int rank = 1; rank < world; ++rank) {
    helpers.emplace_back([&, rank] {
      try {
        auto pg = frameshard::make_gloo_group(store, rank, world, go);
        at::Tensor local = at::randn({counts[rank], hidden});
        for (int64_t i = 0; i < iterations; ++i) {
          gather_once(mode, local, counts, pg);
        }
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  try {
    auto pg = frameshard::make_gloo_group(store, 0, world, go);
    at::Tensor local = at::randn({counts[0], hidden});
    for (auto _ : state) {
      at::Tensor full = gather_once(mode, local, counts, pg);
      benchmark::DoNotOptimize(full.data_ptr());
    }
  } catch (const std::exception& e) {
    errors[0] = e.what();
  }
  for (auto& t : helpers) {
    t.join();
  }
  for (const auto& e : errors) {
    if (!e.empty()) {
      state.SkipWithError(e.c_str());
      return;
    }
  }

  const int64_t row_bytes = hidden * static_cast<int64_t>(sizeof(float));
  int64_t unpadded = 0;
  int64_t padded = 0;
  for (int r = 0; r < world; ++r) {
    const auto t = frameshard::gather_traffic(counts, r, row_bytes);
    unpadded += t.unpadded_bytes;
    padded += t.padded_bytes;
  }
  const int64_t sent = mode == Mode::kUnpadded ? unpadded : padded;
  state.SetBytesProcessed(state.iterations() * sent);
  state.counters["MB_sent_per_rank"] = static_cast<double>(sent) / world / 1e6;
  state.counters["bytes_ratio"] =
      unpadded > 0 ? static_cast<double>(padded) / unpadded : 1.0;
  state.counters["rows"] = static_cast<double>(
      std::accumulate(counts.begin(), counts.end(), int64_t{0}));
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // every rank is a thread: no intra-op pools
  for (const auto& preset : frameshard::workload_preset_names()) {
    for (Mode mode : {Mode::kUnpadded, Mode::kPadded}) {
      const std::string name = "BM_Gather/" + preset +
                               (mode == Mode::kUnpadded ? "/unpadded_alltoall"
                                                        : "/padded_allgather");
      benchmark::RegisterBenchmark(name.c_str(), BM_Gather, preset, mode)
          ->ArgName("world")
          ->DenseRange(2, 4)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
