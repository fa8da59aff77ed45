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
// Pure function: every rank reaches the same decision from the same metadata.
#pragma once

#include <cstdint>
#include <string>

namespace frameshard {

struct PolicyOptions {
  bool enabled = false;
  int64_t min_tokens = 2048;
  int64_t min_frames = 32;
};

struct PolicyDecision {
  bool shard = false;
  std::string reason;  // one line, e.g. "disabled", "cp_size 1 <= 1"
};

PolicyDecision decide_policy(
    const PolicyOptions& options,
    int64_t cp_size,
    int64_t units,
    int64_t tokens);

}  // namespace frameshard
