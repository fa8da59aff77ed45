// The pieces of split frames a rank holds (ShardPlan with split_frames), as
// the JSON of `plan`, `encode` and `verify` and the one-line text of `encode`
// and `verify` give them (`plan`'s table prints one piece per line).
//
// Usage:
//   for (const auto& r : plan.ranks) {
//     j["pieces"] = pieces_json(plan, r);  // [{unit, frame, begin, end, of}]
//     os << pieces_text(plan, r);  // ", unit 3 rows [0, 4096) of 16384, ..."
//   }
#pragma once

#include <frameshard/plan.h>

#include <nlohmann/json.hpp>

#include <string>

namespace frameshard {
namespace cli {

/// [{"unit": u, "frame": local frame, "begin": b, "end": e, "of": the frame's
/// patch rows}, ...]: rows [b, e) of unit u, the rank's local frame `frame`;
/// [] when the rank holds whole frames only.
nlohmann::json pieces_json(const ShardPlan& plan, const RankShard& rank);

/// ", unit u rows [begin, end) of N, ..., receives R K/V rows per layer",
/// or "" when the rank holds whole frames only.
std::string pieces_text(const ShardPlan& plan, const RankShard& rank);

}  // namespace cli
}  // namespace frameshard
