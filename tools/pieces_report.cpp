// Split-frame pieces in the command reports (pieces_report.h).
#include "pieces_report.h"

#include <sstream>

namespace frameshard {
namespace cli {

namespace {

int64_t unit_of(const RankShard& rank, const FramePiece& p) {
  return rank.units.at(static_cast<size_t>(p.frame));
}

int64_t frame_rows(const ShardPlan& plan, int64_t unit) {
  return plan.frames.units.at(static_cast<size_t>(unit)).patch_rows;
}

}  // namespace

nlohmann::json pieces_json(const ShardPlan& plan, const RankShard& rank) {
  nlohmann::json out = nlohmann::json::array();
  for (const FramePiece& p : rank.pieces) {
    const int64_t unit = unit_of(rank, p);
    out.push_back(
        {{"unit", unit},
         {"frame", p.frame},
         {"begin", p.begin},
         {"end", p.end},
         {"of", frame_rows(plan, unit)}});
  }
  return out;
}

std::string pieces_text(const ShardPlan& plan, const RankShard& rank) {
  std::ostringstream os;
  for (const FramePiece& p : rank.pieces) {
    const int64_t unit = unit_of(rank, p);
    os << ", unit " << unit << " rows [" << p.begin << ", " << p.end << ") of "
       << frame_rows(plan, unit);
  }
  if (!rank.pieces.empty()) {
    os << ", receives " << rank.exchange_rows << " K/V rows per layer";
  }
  return os.str();
}

}  // namespace cli
}  // namespace frameshard
