// Visual-embedding traffic of the two gathers, simulated for CP = 2 to 64
// without running a tower: for the training job's synthetic batches (each
// preset at the default recipe's scale; text around every medium), the
// bytes each rank receives per step through the all-gather (every rank gets
// every row it did not encode) and through owner routing (a rank gets only
// the rows of its load-balanced sequence chunks that another rank encoded),
// and the visual rows each rank then holds (all of them, or its own).
// Figures are exact counts from the plan and the owners
// (frameshard/owner_route.h), not timings.
//
// Usage: frameshard_owner_traffic [--steps N] [--row-bytes B]
//   (B: bytes of one visual row over all outputs; default 512, the default
//   recipe's 64-wide embeddings and one DeepStack output in float32)
#include <frameshard/owner_route.h>
#include <frameshard/plan.h>
#include <frameshard/train/data_batch.h>
#include <frameshard/train/train_config.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace frameshard;

struct Traffic {
  double allgather = 0;  // bytes received per step, largest rank, mean
  double owner = 0;
  double held_all = 0;    // visual rows held per rank: all of them
  double held_owner = 0;  // largest rank's own rows
};

Traffic simulate(
    const std::string& preset, int64_t cp, int64_t steps, int64_t row_bytes) {
  train::TrainConfig cfg = train::default_train_config();
  cfg.data.preset = preset;
  cfg.parallel.cp_size = cp;
  PlanOptions o = train::arm_plan_options(cfg, true);
  o.policy.min_tokens = 0;  // the traffic of the sharded path at every CP
  o.policy.min_frames = 0;
  Traffic t;
  for (int64_t s = 0; s < steps; ++s) {
    const train::BatchLayout b = train::synthetic_batch(
        cfg.data, o.layout, {cfg.model.vocab_size, 2 * cp, s, 0});
    std::vector<int64_t> pos;
    for (size_t p = 0; p < b.tokens.size(); ++p) {
      if (b.tokens[p] == train::kMediaToken) {
        pos.push_back(static_cast<int64_t>(p));
      }
    }
    const ShardPlan plan = make_plan(b.grid, o);
    const auto owner =
        visual_token_owners(pos, b.seq_len(), cp, SequenceSplit::kLoadBalanced);
    int64_t ag = 0, ow = 0, held = 0;
    for (int64_t r = 0; r < cp; ++r) {
      ag = std::max(ag, plan.frames.total_tokens - plan.gather_counts[r]);
      const OwnerRoute route = owner_route(plan, owner, r);
      const auto n = static_cast<int64_t>(route.tokens.size());
      ow = std::max(ow, n - route.recv_counts[r]);
      held = std::max(held, n);
    }
    t.allgather += double(ag * row_bytes) / double(steps);
    t.owner += double(ow * row_bytes) / double(steps);
    t.held_all += double(plan.frames.total_tokens * row_bytes) / double(steps);
    t.held_owner += double(held * row_bytes) / double(steps);
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Visual-embedding bytes of the all-gather vs owner routing"};
  int64_t steps = 10;
  int64_t row_bytes = 512;
  app.add_option("--steps", steps, "Batches per preset")->capture_default_str();
  app.add_option("--row-bytes", row_bytes, "Bytes per visual row")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::printf(
      "%-6s %4s  %14s %14s %7s  %14s %14s %7s\n",
      "preset",
      "cp",
      "all-gather in",
      "owner in",
      "ratio",
      "rows held all",
      "held owner",
      "ratio");
  for (const char* preset : {"doc", "multi", "video", "mixed"}) {
    for (int64_t cp : {2, 4, 8, 16, 32, 64}) {
      const Traffic t = simulate(preset, cp, steps, row_bytes);
      std::printf(
          "%-6s %4lld  %11.1f KiB %11.1f KiB %7.3f  %11.1f KiB "
          "%11.1f KiB %7.3f\n",
          preset,
          static_cast<long long>(cp),
          t.allgather / 1024,
          t.owner / 1024,
          t.owner / t.allgather,
          t.held_all / 1024,
          t.held_owner / 1024,
          t.held_owner / t.held_all);
    }
  }
  return 0;
}
