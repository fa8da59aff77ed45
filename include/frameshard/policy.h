// File: frameshard/policy.h
//
// When sharding pays. Shard only if enabled, cp_size > 1, there is at least
// one frame unit, and NOT (merged tokens < min_tokens AND units < min_frames):
// either threshold alone is enough to shard, so a long low-resolution video
// shards on its frame count even when its token count is small.
//
// Usage:
//   frameshard::PolicyOptions p;
//   p.enabled = true;
//   auto d = frameshard::decide_policy(p, /*cp_size=*/2, /*units=*/40,
//                                      /*tokens=*/512);
//   // d.shard == true, d.reason == "units 40 >= min_frames 32"
//
// The `auto` policy (PolicyKind::kAuto, config frame_sharding.policy: auto)
// replaces the two thresholds by the predicted trade: shard when the vision
// time saved exceeds the time the gather adds,
//
//   saving = (sum of unit costs - slowest rank's cost) * seconds_per_unit
//   gather = rows the slowest receiving rank gets (all tokens but its own)
//            * gather_row_bytes / (gather_bandwidth_gbps * 1e9)
//   shard iff saving > gather
//
// seconds_per_unit comes from the cost model (frameshard/cost.h: 1 for a
// calibrated model, an assumed 100 TFLOP/s for a FLOP model). The gather
// is modelled on its bytes alone (no latency term) and the default 25 GB/s
// is a conservative one-NIC / PCIe figure; NVLink is 10x that. The row
// width defaults to a 4096-wide language model in bf16 (8192 bytes).
//
// Usage (auto):
//   frameshard::PolicyOptions p;
//   p.enabled = true;
//   p.kind = frameshard::PolicyKind::kAuto;
//   auto d = frameshard::decide_policy(p, cost, frames, unit_costs, part);
//   // d.reason: "saving 1.2 ms > gather 0.3 ms"
//
// Pure functions: every rank reaches the same decision from the same metadata.
#pragma once

#include <frameshard/cost.h>
#include <frameshard/frames.h>
#include <frameshard/partition.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

enum class PolicyKind { kThreshold, kAuto };
/// "threshold" / "auto".
std::string to_string(PolicyKind kind);
/// Parses "threshold" or "auto"; frameshard::Error naming `field` otherwise.
PolicyKind parse_policy_kind(const std::string& name, const char* field);

/// Default frame_sharding.gather_bandwidth_gbps.
constexpr double kDefaultGatherBandwidthGbps = 25.0;

struct PolicyOptions {
  bool enabled = false;
  int64_t min_tokens = 2048;  // threshold policy
  int64_t min_frames = 32;    // threshold policy
  PolicyKind kind = PolicyKind::kThreshold;
  double gather_bandwidth_gbps = kDefaultGatherBandwidthGbps;  // auto
  int64_t gather_row_bytes = 4096 * 2;                         // auto
};

/// The rule `options` applies, in one phrase for reports: "threshold
/// (min_tokens 2048, min_frames 32)" or "auto (saving > gather at 25 GB/s,
/// 8192 B/row)" (only the fields that kind reads).
std::string describe_policy(const PolicyOptions& options);

/// What the auto policy weighed, in seconds.
struct PolicyEstimate {
  double replicated_seconds = 0.0;  // every unit on one rank
  double slowest_seconds = 0.0;     // the slowest rank's units
  double gather_seconds = 0.0;      // the slowest receiving rank
  double saving_seconds() const {
    return replicated_seconds - slowest_seconds;
  }
};

/// The auto policy's inputs from a partition of the frame set's units
/// (unit_costs in `cost`'s units). Throws when cost.seconds_per_unit <= 0.
PolicyEstimate estimate_policy(
    const PolicyOptions& options,
    const CostModel& cost,
    const FrameSet& frames,
    const std::vector<double>& unit_costs,
    const Partition& partition);

struct PolicyDecision {
  bool shard = false;
  std::string reason;  // one line, e.g. "disabled", "cp_size 1 <= 1"
};

/// The threshold policy (the `kind` is ignored).
PolicyDecision decide_policy(
    const PolicyOptions& options,
    int64_t cp_size,
    int64_t units,
    int64_t tokens);

/// The policy of options.kind: threshold (as above) or auto (estimate_policy
/// then saving > gather). What make_plan calls.
PolicyDecision decide_policy(
    const PolicyOptions& options,
    const CostModel& cost,
    const FrameSet& frames,
    const std::vector<double>& unit_costs,
    const Partition& partition);

}  // namespace frameshard
