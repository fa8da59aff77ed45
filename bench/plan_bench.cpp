// Planner speed: make_plan (expand, cost, policy, partition, per-rank
// shards, restore permutation, fingerprint) and partition_costs alone, for
// 64 to 65,536 frame units over K = 2 to 64 ranks. Target: < 50 us for
// 4,096 units at K = 64 with the optimal partitioner. BM_MakeSplitPlan is
// make_plan with split_frames (frameshard/split_plan.h) on the same batches.
//
//   cmake --build build --target frameshard_plan_bench
//   build/bench/frameshard_plan_bench --benchmark_filter='/4096/64'
//
// The workload is a seeded mix of images and videos (own PRNG, identical on
// every machine), cut to exactly the requested number of frame units.
#include <frameshard/plan.h>
#include <frameshard/splitmix64.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

// About 1 in 8 media is a large image (16..128 patches a side), the rest are
// videos of 4..64 temporal units at 8..48 patches a side (merge size 2).
std::vector<frameshard::GridThw> mixed_grid(int64_t units, uint64_t seed) {
  frameshard::SplitMix64 rng(seed);
  std::vector<frameshard::GridThw> grid;
  int64_t have = 0;
  while (have < units) {
    frameshard::GridThw g;
    if (rng.uniform(0, 7) == 0) {
      g = {1, 2 * rng.uniform(8, 64), 2 * rng.uniform(8, 64)};
    } else {
      g = {rng.uniform(4, 64), 2 * rng.uniform(4, 24), 2 * rng.uniform(4, 24)};
    }
    g.t = std::min(g.t, units - have);
    have += g.t;
    grid.push_back(g);
  }
  return grid;
}

frameshard::PlanOptions options(int64_t world, int64_t method) {
  frameshard::PlanOptions o;
  o.world = world;
  o.partitioner = static_cast<frameshard::Partitioner>(method);
  o.policy.enabled = true;
  return o;
}

void BM_MakePlan(benchmark::State& state) {
  const int64_t units = state.range(0);
  const auto opts = options(state.range(1), state.range(2));
  const auto grid = mixed_grid(units, 42);
  double imbalance = 0.0;
  for (auto _ : state) {
    frameshard::ShardPlan plan = frameshard::make_plan(grid, opts);
    imbalance = plan.partition.imbalance();
    benchmark::DoNotOptimize(plan.fingerprint);
  }
  state.SetItemsProcessed(state.iterations() * units);
  state.counters["imbalance"] = imbalance;
}

void BM_MakeSplitPlan(benchmark::State& state) {
  const int64_t units = state.range(0);
  auto opts = options(state.range(1), 0);
  opts.split.enabled = true;
  const auto grid = mixed_grid(units, 42);
  frameshard::ShardPlan plan;
  for (auto _ : state) {
    plan = frameshard::make_plan(grid, opts);
    benchmark::DoNotOptimize(plan.fingerprint);
  }
  state.SetItemsProcessed(state.iterations() * units);
  state.counters["imbalance"] = plan.partition.imbalance();
  state.counters["unsplit"] =
      plan.unsplit_max_cost / plan.partition.mean_cost();
  state.counters["split"] = plan.split ? 1 : 0;
}

void BM_PartitionCosts(benchmark::State& state) {
  const int64_t units = state.range(0);
  const int64_t world = state.range(1);
  const auto method = static_cast<frameshard::Partitioner>(state.range(2));
  const auto grid = mixed_grid(units, 42);
  const frameshard::CostModel cost =
      frameshard::flop_cost_model(frameshard::tower_preset("qwen3-vl"));
  std::vector<double> costs;
  for (const auto& u : frameshard::expand_frames(grid).units) {
    costs.push_back(cost(u.patch_rows));
  }
  double imbalance = 0.0;
  for (auto _ : state) {
    frameshard::Partition p = frameshard::partition_costs(costs, world, method);
    imbalance = p.imbalance();
    benchmark::DoNotOptimize(p.rank_costs.data());
  }
  state.SetItemsProcessed(state.iterations() * units);
  state.counters["imbalance"] = imbalance;
  state.counters["ratio_to_optimal"] =
      frameshard::partition_costs(costs, world, method).max_cost() /
      frameshard::optimal_bottleneck(costs, world);
}

// expand_frames alone: the floor under make_plan (it writes one 64-byte
// FrameUnit per unit).
void BM_ExpandFrames(benchmark::State& state) {
  const int64_t units = state.range(0);
  const auto grid = mixed_grid(units, 42);
  for (auto _ : state) {
    frameshard::FrameSet fs = frameshard::expand_frames(grid);
    benchmark::DoNotOptimize(fs.units.data());
  }
  state.SetItemsProcessed(state.iterations() * units);
}

constexpr int64_t kOptimal =
    static_cast<int64_t>(frameshard::Partitioner::kOptimal);

// The full grid for the default partitioner.
BENCHMARK(BM_MakePlan)
    ->ArgNames({"units", "k", "method"})
    ->ArgsProduct(
        {benchmark::CreateRange(64, 65536, 4),
         benchmark::CreateRange(2, 64, 2),
         {kOptimal}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PartitionCosts)
    ->ArgNames({"units", "k", "method"})
    ->ArgsProduct(
        {benchmark::CreateRange(64, 65536, 4),
         benchmark::CreateRange(2, 64, 2),
         {kOptimal}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ExpandFrames)
    ->ArgName("units")
    ->RangeMultiplier(4)
    ->Range(64, 65536)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MakeSplitPlan)
    ->ArgNames({"units", "k"})
    ->ArgsProduct({{64, 1024, 4096, 16384, 65536}, {2, 8, 64}})
    ->Unit(benchmark::kMicrosecond);
// Every partitioner at the target size (method: 0 optimal, 1 greedy,
// 2 count, 3 lpt).
BENCHMARK(BM_MakePlan)
    ->ArgNames({"units", "k", "method"})
    ->ArgsProduct({{4096}, {64}, {1, 2, 3}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PartitionCosts)
    ->ArgNames({"units", "k", "method"})
    ->ArgsProduct({{4096}, {64}, {1, 2, 3}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
