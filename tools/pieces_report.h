// The pieces of split frames a rank ran (ShardPlan with split_frames), as
// the reports of `encode` and `verify` print them.
//
// Usage:
//   for (const auto& r : plan.ranks) {
//     j["pieces"] = pieces_json(plan, r);  // [{unit, rows, of}, ...]
//     os << pieces_text(plan, r);  // ", unit 3 rows [0, 4096) of 16384, ..."
//   }
#pragma once

#include <frameshard/plan.h>

#include <nlohmann/json.hpp>

#include <string>

namespace frameshard {
namespace cli {

/// [{"unit": u, "rows": [begin, end], "of": frame rows}, ...]; [] when the
/// rank holds whole frames only.
nlohmann::json pieces_json(const ShardPlan& plan, const RankShard& rank);

/// ", unit u rows [begin, end) of N, ..., receives R K/V rows per layer",
/// or "" when the rank holds whole frames only.
std::string pieces_text(const ShardPlan& plan, const RankShard& rank);

}  // namespace cli
}  // namespace frameshard
