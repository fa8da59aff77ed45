// The towers `frameshard verify` checks: the toy tower (the default; whole
// frames only) or a small random Qwen tower of each family, which also runs
// split frames (--tower qwen2-vl | qwen2.5-vl | qwen3-vl: width 32, depth 2,
// patch 4, the workload's merge and temporal patch sizes).
//
// Usage:
//   const VerifyTower t = verify_tower("qwen2.5-vl", workload.layout);
//   spec.in_features = t.in_features;
//   spec.plan.split.window_side = t.window_side;
//   parity::prepare(spec, t.factory, {rank});
#pragma once

#include "parity/parity.h"

#include <frameshard/frames.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

struct VerifyTower {
  parity::TowerFactory factory;
  int64_t in_features = 0;
  std::vector<std::string> output_names;
  int64_t window_side = 0;  // SplitOptions::window_side
};

/// "toy" | "qwen2-vl" | "qwen2.5-vl" | "qwen3-vl"; frameshard::Error naming
/// --tower otherwise.
VerifyTower verify_tower(const std::string& name, const MediaLayout& layout);

/// The names verify_tower accepts.
std::vector<std::string> verify_tower_names();

}  // namespace cli
}  // namespace frameshard
