#include <frameshard/error.h>
#include <frameshard/policy.h>

#include "core/units_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace frameshard {

std::string to_string(PolicyKind kind) {
  return kind == PolicyKind::kAuto ? "auto" : "threshold";
}

std::string describe_policy(const PolicyOptions& options) {
  if (options.kind == PolicyKind::kAuto) {
    char buf[96];
    std::snprintf(
        buf,
        sizeof(buf),
        "auto (saving > gather at %.4g GB/s, %lld B/row)",
        options.gather_bandwidth_gbps,
        static_cast<long long>(options.gather_row_bytes));
    return buf;
  }
  return "threshold (min_tokens " + std::to_string(options.min_tokens) +
         ", min_frames " + std::to_string(options.min_frames) + ")";
}

PolicyKind parse_policy_kind(const std::string& name, const char* field) {
  if (name == "threshold") {
    return PolicyKind::kThreshold;
  }
  if (name == "auto") {
    return PolicyKind::kAuto;
  }
  detail::fail(
      "parse_policy_kind",
      field,
      ": expected threshold or auto, got \"",
      detail::excerpt(name),
      "\"");
}

PolicyEstimate estimate_policy(
    const PolicyOptions& options,
    const CostModel& cost,
    const FrameSet& frames,
    const std::vector<double>& unit_costs,
    const Partition& partition) {
  const char* fn = "estimate_policy";
  FRAMESHARD_CHECK(
      cost.seconds_per_unit > 0.0,
      fn,
      "expected a cost model with seconds_per_unit > 0 (calibrated or FLOP), "
      "got ",
      cost.seconds_per_unit,
      " for ",
      cost.label);
  FRAMESHARD_CHECK(
      std::isfinite(options.gather_bandwidth_gbps) &&
          options.gather_bandwidth_gbps > 0.0,
      fn,
      "expected gather_bandwidth_gbps > 0, got ",
      options.gather_bandwidth_gbps);
  FRAMESHARD_CHECK(
      options.gather_row_bytes > 0,
      fn,
      "expected gather_row_bytes > 0, got ",
      options.gather_row_bytes);
  FRAMESHARD_CHECK(
      unit_costs.size() == frames.units.size() &&
          partition.assignment.size() == frames.units.size(),
      fn,
      "expected one cost and one rank per frame unit (",
      frames.units.size(),
      "), got ",
      unit_costs.size(),
      " costs and ",
      partition.assignment.size(),
      " ranks");
  std::vector<int64_t> tokens(static_cast<size_t>(partition.world), 0);
  double total = 0.0;
  for (std::size_t i = 0; i < frames.units.size(); ++i) {
    tokens[static_cast<size_t>(partition.assignment[i])] +=
        frames.units[i].tokens;
    total += unit_costs[i];
  }
  const int64_t own = *std::min_element(tokens.begin(), tokens.end());
  PolicyEstimate e;
  e.replicated_seconds = total * cost.seconds_per_unit;
  e.slowest_seconds = partition.max_cost() * cost.seconds_per_unit;
  e.gather_seconds = static_cast<double>(frames.total_tokens - own) *
                     static_cast<double>(options.gather_row_bytes) /
                     (options.gather_bandwidth_gbps * 1e9);
  return e;
}

PolicyDecision decide_policy(
    const PolicyOptions& options,
    int64_t cp_size,
    int64_t units,
    int64_t tokens) {
  const char* fn = "decide_policy";
  FRAMESHARD_CHECK(cp_size >= 1, fn, "expected cp_size >= 1, got ", cp_size);
  FRAMESHARD_CHECK(units >= 0, fn, "expected units >= 0, got ", units);
  FRAMESHARD_CHECK(tokens >= 0, fn, "expected tokens >= 0, got ", tokens);
  FRAMESHARD_CHECK(
      options.min_tokens >= 0,
      fn,
      "expected min_tokens >= 0, got ",
      options.min_tokens);
  FRAMESHARD_CHECK(
      options.min_frames >= 0,
      fn,
      "expected min_frames >= 0, got ",
      options.min_frames);

  using std::to_string;
  if (!options.enabled) {
    return {false, "disabled"};
  }
  if (cp_size <= 1) {
    return {false, "cp_size " + to_string(cp_size) + " <= 1"};
  }
  if (units == 0) {
    return {false, "no frame units"};
  }
  // Either threshold alone is enough to shard.
  if (tokens >= options.min_tokens) {
    return {
        true,
        "tokens " + to_string(tokens) + " >= min_tokens " +
            to_string(options.min_tokens)};
  }
  if (units >= options.min_frames) {
    return {
        true,
        "units " + to_string(units) + " >= min_frames " +
            to_string(options.min_frames)};
  }
  return {
      false,
      "tokens " + to_string(tokens) + " < min_tokens " +
          to_string(options.min_tokens) + " and units " + to_string(units) +
          " < min_frames " + to_string(options.min_frames)};
}

}  // namespace frameshard

namespace frameshard {

PolicyDecision decide_policy(
    const PolicyOptions& options,
    const CostModel& cost,
    const FrameSet& frames,
    const std::vector<double>& unit_costs,
    const Partition& partition) {
  const int64_t units = static_cast<int64_t>(frames.units.size());
  if (options.kind == PolicyKind::kThreshold || !options.enabled ||
      partition.world <= 1 || units == 0) {
    return decide_policy(options, partition.world, units, frames.total_tokens);
  }
  const PolicyEstimate e =
      estimate_policy(options, cost, frames, unit_costs, partition);
  const double saving = e.saving_seconds();
  const auto ms = internal::milliseconds_text;
  if (saving > e.gather_seconds) {
    return {true, "saving " + ms(saving) + " > gather " + ms(e.gather_seconds)};
  }
  return {false, "saving " + ms(saving) + " <= gather " + ms(e.gather_seconds)};
}

}  // namespace frameshard
