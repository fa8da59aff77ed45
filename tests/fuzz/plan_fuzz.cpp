// Fuzz target: the plan builder (frameshard::make_plan) over arbitrary grids
// and options: world, partitioner, cost spec (parse_cost_alpha), floor rows,
// layout and policy, each drawn either small (deep into valid plans) or as
// any 64-bit value (the limits). Every input must plan or raise
// frameshard::Error; a plan must be internally consistent (one shard per
// rank, gather counts summing to the tokens, cu_seqlens ending at the rows
// fed, restore_rows a permutation) and deterministic.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build):
//   build-fuzz/tests/fuzz/plan_fuzz tests/fuzz/corpus/plan -max_total_time=30
#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/plan.h>

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// Mostly a value in [lo, hi], one time in eight any int64.
int64_t draw(FuzzedDataProvider& in, int64_t lo, int64_t hi) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    return in.ConsumeIntegral<int64_t>();
  }
  return in.ConsumeIntegralInRange<int64_t>(lo, hi);
}

// Mostly m * [1, hi] (a multiple of the merge size), one time in eight any
// int64.
int64_t draw_multiple(FuzzedDataProvider& in, int64_t m, int64_t hi) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    return in.ConsumeIntegral<int64_t>();
  }
  return m * in.ConsumeIntegralInRange<int64_t>(1, hi);
}

const char* const kCostSpecs[] = {
    "auto", "0", "1", "2.5", "automodel", "qwen2.5-vl", "quadratic:1,2,3"};

frameshard::PlanOptions draw_options(FuzzedDataProvider& in) {
  frameshard::PlanOptions o;
  o.world = draw(in, 1, 9);
  o.partitioner = frameshard::all_partitioners().at(
      in.ConsumeIntegralInRange<std::size_t>(0, 3));
  const std::string spec = in.ConsumeBool()
                               ? std::string(in.PickValueInArray(kCostSpecs))
                               : in.ConsumeRandomLengthString(24);
  o.cost = frameshard::parse_cost_alpha(spec);
  o.min_local_patch_rows = draw(in, 0, 256);
  o.layout.spatial_merge_size = draw(in, 1, 3);
  o.layout.temporal_patch_size = draw(in, 1, 2);
  o.policy.enabled = in.ConsumeBool();
  o.policy.min_tokens = draw(in, 0, 64);
  o.policy.min_frames = draw(in, 0, 8);
  return o;
}

std::vector<frameshard::GridThw> draw_grid(
    FuzzedDataProvider& in, int64_t merge) {
  std::vector<frameshard::GridThw> grid;
  const int64_t m = merge >= 1 && merge <= 3 ? merge : 1;
  while (in.remaining_bytes() > 0 && grid.size() < 256) {
    frameshard::GridThw g;
    g.t = draw(in, 1, 8);
    g.h = draw_multiple(in, m, 16);
    g.w = draw_multiple(in, m, 16);
    grid.push_back(g);
  }
  return grid;
}

void check_plan(const frameshard::ShardPlan& plan) {
  const auto& o = plan.options;
  bool ok = static_cast<int64_t>(plan.ranks.size()) == o.world &&
            static_cast<int64_t>(plan.gather_counts.size()) == o.world;
  int64_t gathered = 0;
  for (int64_t c : plan.gather_counts) {
    gathered += c;
  }
  ok = ok && gathered == plan.frames.total_tokens;
  for (const auto& r : plan.ranks) {
    ok = ok && !r.cu_seqlens.empty() && r.cu_seqlens.front() == 0 &&
         r.cu_seqlens.back() == r.local_patch_rows &&
         r.real_patch_rows <= r.local_patch_rows;
  }
  if (!plan.restore_rows.empty()) {
    std::vector<bool> seen(plan.restore_rows.size(), false);
    for (int64_t i : plan.restore_rows) {
      ok = ok && i >= 0 && i < static_cast<int64_t>(seen.size()) && !seen[i];
      if (ok) {
        seen[i] = true;
      }
    }
  }
  if (!ok) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  frameshard::PlanOptions options;
  std::vector<frameshard::GridThw> grid;
  try {
    options = draw_options(in);
    grid = draw_grid(in, options.layout.spatial_merge_size);
  } catch (const frameshard::Error&) {
    return 0;  // a cost spec parse_cost_alpha refuses
  }
  frameshard::ShardPlan plan;
  try {
    plan = frameshard::make_plan(grid, options);
  } catch (const frameshard::Error&) {
    return 0;
  }
  check_plan(plan);
  if (frameshard::make_plan(grid, options).fingerprint != plan.fingerprint) {
    std::abort();
  }
  return 0;
}
