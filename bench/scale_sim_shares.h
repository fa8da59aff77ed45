// The per-rank mode of the scale simulation (bench/scale_sim.cpp): one
// batch (a preset, a workload file or the first samples of a manifest)
// planned at each CP size by every partitioner and by the optimal one with
// split_frames, under the FLOP model and, when given, a calibrated cost
// (`frameshard calibrate`'s file); each rank's share timed alone on the
// tower's device (tools/tower_timing.h), and the predicted vision speed-up
// replicated / (slowest rank + its modelled K/V exchange + gather).
// Plans that assign the same frames as one already timed reuse its times.
// With online_rounds, one more row: split frames under cost_alpha online,
// learned from the shares' own times over that many rounds (its curve and
// fit in the JSON).
//
// Why alone: on one GPU (or one core) the ranks' shares cannot run side by
// side without sharing it, and the bottleneck of the shares timed alone is
// what CP ranks on separate GPUs would wait for.
//
// Usage:
//   SharesRequest req;            // cps {2, 4, 8}, 25 GB/s, 1 repeat
//   req.cost_alpha = "cal.txt";  // a `frameshard calibrate` file
//   nlohmann::json j = simulate_shares(req, "mixed", grid, tower);
//   // prints the table; j["cps"][0]["arms"][0]["speedup"] ...
#pragma once

#include <frameshard/frames.h>
#include <frameshard/models/qwen_factory.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace bench {

struct SharesRequest {
  std::vector<int64_t> cps{2, 4, 8};
  double bandwidth_gbps = 25.0;  // gather and K/V exchange, per rank
  int repeats = 1;               // timed runs per share (median)
  std::string cost_alpha;        // a calibrate file: a second set of plans
  int online_rounds = 0;         // > 0: cost_alpha online, learned this often
};

/// Times the replicated batch and every rank of every plan, prints one
/// table and returns its figures (see the banner). Single-threaded.
nlohmann::json simulate_shares(
    const SharesRequest& request,
    const std::string& label,
    const std::vector<GridThw>& grid,
    const models::QwenVisionModel& tower);

}  // namespace bench
}  // namespace frameshard
