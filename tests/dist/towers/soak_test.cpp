// Soak (issue 13): many consecutive sharded encode steps, forward and
// backward, on a fresh random workload each step, world 3 (ranks as
// threads, Gloo): no hang (run_ranks' hang limit), no error, and flat memory
// (the process's resident set after the warm-up steps grows by less than
// kRssGrowthBound over the rest of the run), and a planted leak fails that
// bound (so the check can fail).
//
// Steps: FRAMESHARD_SOAK_STEPS (default 50, the CI count); the long run is
//   FRAMESHARD_SOAK_STEPS=1000 build/tests/frameshard_dist_tower_tests
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

struct SoakRun {
  int64_t steps = 0;
  double seconds = 0;
  int64_t rss_warm = 0;  // after kWarmupSteps
  int64_t rss_end = 0;
  int64_t growth() const {
    return rss_end - rss_warm;
  }
};

// `steps` sharded steps at world 3; each rank keeps `leak_bytes` of every
// step alive to the end (0: none), as a leak would.
SoakRun run_soak(int64_t steps, int64_t leak_bytes) {
  const int world = 3;
  SoakRun run;
  run.steps = steps;
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
        std::vector<at::Tensor> leaked;
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
          if (leak_bytes > 0) {
            // randn writes every byte, so the pages are resident.
            leaked.push_back(torch::randn({leak_bytes / 8}, torch::kDouble));
          }
          if (rank == 0 && step + 1 == kWarmupSteps) {
            run.rss_warm = resident_bytes();
          }
        }
        pg->barrier()->wait();
        if (rank == 0) {
          run.rss_end = resident_bytes();
        }
        pg->barrier()->wait();
      },
      ro);
  run.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "soak: %lld steps at world %d in %.1f s%s; resident set %.1f MB after "
      "%lld warm-up steps, %.1f MB at the end (growth %+.2f MB, bound %lld "
      "MB)\n",
      static_cast<long long>(steps),
      world,
      run.seconds,
      leak_bytes > 0 ? (", leaking " + std::to_string(leak_bytes) +
                        " bytes a step on each rank")
                           .c_str()
                     : "",
      run.rss_warm / 1048576.0,
      static_cast<long long>(kWarmupSteps),
      run.rss_end / 1048576.0,
      run.growth() / 1048576.0,
      static_cast<long long>(kRssGrowthBound >> 20));
  return run;
}

TEST(Soak, ShardedStepsOnRandomWorkloadsKeepMemoryFlat) {
  const SoakRun run = run_soak(soak_steps(), 0);
  EXPECT_LT(run.growth(), kRssGrowthBound);
}

// The bound is a real check: a leak planted at twice the smallest rate it
// can see over this many steps (bound / measured steps, across the three
// ranks) fails it. At the CI count (50 steps) that is 2.2 MB a step; at the
// long run's 1,000 steps 68 KB a step.
TEST(Soak, TheMemoryBoundCatchesAPlantedLeak) {
  const int64_t steps = soak_steps();
  const int64_t per_rank = 2 * kRssGrowthBound / (steps - kWarmupSteps) / 3;
  const SoakRun run = run_soak(steps, per_rank);
  EXPECT_GE(run.growth(), kRssGrowthBound)
      << "a leak of " << per_rank << " bytes a step on each of 3 ranks";
}

}  // namespace
}  // namespace frameshard
