// Soak (issue 13): many consecutive sharded encode steps, forward and
// backward, on a fresh random workload each step, world 3 (ranks as
// threads, Gloo): no hang (run_ranks' hang limit), no error, and flat memory
// (the process's resident set after the warm-up steps grows by less than
// kRssGrowthBound over the rest of the run).
//
// Steps: FRAMESHARD_SOAK_STEPS (default 50, the CI count); the long run is
//   FRAMESHARD_SOAK_STEPS=1000 build/tests/frameshard_dist_tests
//   --gtest_filter='Soak.*'
// It prints the steps, the seconds and the resident set at the end of the
// warm-up and of the run (docs/reliability.md lists the measured ones).
#include <frameshard/models/toy_tower.h>
#include <frameshard/runtime/encode.h>

#include "testing/run_ranks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using models::ToyTower;
using models::ToyTowerOptions;

// Bytes the resident set may grow by after the warm-up: a leak of one
// step's tensors (tens of KB each) over hundreds of steps exceeds it, while
// allocator noise (glibc arenas of three rank threads) stays well below.
constexpr int64_t kRssGrowthBound = int64_t{32} << 20;
constexpr int64_t kWarmupSteps = 20;

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  int64_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t soak_steps() {
  const char* env = std::getenv("FRAMESHARD_SOAK_STEPS");
  return env != nullptr ? std::max<int64_t>(std::atoll(env), kWarmupSteps + 1)
                        : 50;
}

// The same random grid on every rank of a step: 1 to 6 media of 1 to 4
// frames of 2..12 x 2..12 patches (merge 2).
std::vector<GridThw> step_grid(int64_t step) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919 + 1);
  std::vector<GridThw> grid(1 + rng() % 6);
  for (GridThw& g : grid) {
    g.t = 1 + static_cast<int64_t>(rng() % 4);
    g.h = 2 * (1 + static_cast<int64_t>(rng() % 6));
    g.w = 2 * (1 + static_cast<int64_t>(rng() % 6));
  }
  return grid;
}

TEST(Soak, ShardedStepsOnRandomWorkloadsKeepMemoryFlat) {
  const int64_t steps = soak_steps();
  const int world = 3;
  int64_t rss_warm = 0;
  int64_t rss_end = 0;
  const auto start = std::chrono::steady_clock::now();
  testing::RunRanksOptions ro;
  ro.hang_limit = std::chrono::seconds(60 + steps);
  testing::run_ranks(
      world,
      [&](int rank, ProcessGroupPtr pg) {
        torch::manual_seed(0);
        ToyTower tower(ToyTowerOptions{});
        tower->to(at::kDouble);
        const VisionTower fn = models::as_vision_tower(tower);
        EncodeOptions o;
        o.plan.world = world;
        o.plan.policy.enabled = true;
        o.plan.policy.min_tokens = 0;
        o.plan.policy.min_frames = 0;
        o.plan.min_local_patch_rows = 0;
        for (int64_t step = 0; step < steps; ++step) {
          const std::vector<GridThw> grid = step_grid(step);
          int64_t rows = 0;
          std::vector<int64_t> flat;
          for (const GridThw& g : grid) {
            rows += g.patches();
            flat.insert(flat.end(), {g.t, g.h, g.w});
          }
          torch::manual_seed(static_cast<uint64_t>(step));
          const at::Tensor pixels = torch::randn(
              {rows, ToyTowerOptions{}.in_features()}, torch::kDouble);
          const at::Tensor grid_thw =
              torch::tensor(flat, torch::kLong).view({-1, 3});
          const EncodeResult res = encode(fn, pixels, grid_thw, pg, o);
          res.outputs[0].pow(2).sum().backward();
          tower->zero_grad();
          if (rank == 0 && step + 1 == kWarmupSteps) {
            rss_warm = resident_bytes();
          }
        }
        if (rank == 0) {
          rss_end = resident_bytes();
        }
      },
      ro);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "soak: %lld steps at world %d in %.1f s; resident set %.1f MB after "
      "%lld warm-up steps, %.1f MB at the end (growth %+.2f MB, bound %lld "
      "MB)\n",
      static_cast<long long>(steps),
      world,
      seconds,
      rss_warm / 1048576.0,
      static_cast<long long>(kWarmupSteps),
      rss_end / 1048576.0,
      (rss_end - rss_warm) / 1048576.0,
      static_cast<long long>(kRssGrowthBound >> 20));
  EXPECT_LT(rss_end - rss_warm, kRssGrowthBound);
}

}  // namespace
}  // namespace frameshard
