// File: tests/testing/split_checks.h
//
// Reference model of split plans for the torch-free tests, written from the
// banner of frameshard/split_plan.h and independent of the planner: allowed
// cut positions, the cost of a rank's row range, a brute-force optimum, and
// a check of every documented relation of a split plan's ranks.
//
// Usage:
//   PlanOptions opts = split_options(4);
//   ShardPlan plan = make_plan({{1, 64, 64}}, opts);
//   SplitModel m(plan.frames, opts);
//   double best = m.brute_force_optimum(opts.world);
//   check_split_plan(plan, m);
#pragma once

#include <frameshard/owner_route.h>
#include <frameshard/plan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace frameshard {
namespace testing {

/// Sharded split plans under cost p^2 (c = 0), no floor frames.
inline PlanOptions split_options(int64_t world, double exchange = 0.0) {
  PlanOptions o;
  o.world = world;
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.min_local_patch_rows = 0;
  o.cost = CostModel::quadratic(1.0, 0.0, 0.0);
  o.split.enabled = true;
  o.split.exchange_row_cost = exchange;
  o.split.min_gain = 0.0;  // the exact planner: any strict gain
  return o;
}

class SplitModel {
 public:
  SplitModel(const FrameSet& frames, const PlanOptions& o) : frames_(frames) {
    c_ = o.cost.c;
    e_ = o.split.exchange_row_cost;
    const int64_t merge = frames.layout.spatial_merge_size;
    for (const FrameUnit& u : frames.units) {
      const double cost = o.cost(u.patch_rows);
      const int64_t g =
          o.split.window_side > 0 ? o.split.window_side * u.w : merge * merge;
      const double d = (cost - c_) / static_cast<double>(u.patch_rows);
      cost_.push_back(cost);
      density_.push_back(d);
      grain_.push_back(g);
      split_.push_back(d > e_ && u.patch_rows >= 2 * g);
      positions_.push_back(u.pixel_offset);
      if (split_.back()) {
        for (int64_t k = g; k < u.patch_rows; k += g) {
          positions_.push_back(u.pixel_offset + k);
        }
      }
    }
    positions_.push_back(frames.total_patch_rows);
  }

  /// Every allowed cut position, ascending.
  const std::vector<int64_t>& positions() const {
    return positions_;
  }
  bool splittable(int64_t unit) const {
    return split_[unit];
  }
  int64_t grain(int64_t unit) const {
    return grain_[unit];
  }
  bool allowed(int64_t row) const {
    return std::binary_search(positions_.begin(), positions_.end(), row);
  }

  /// Cost of a rank holding rows [x, y): each frame it touches costs its
  /// whole cost, or c + q d + e (p - q) for a piece of q rows.
  double range_cost(int64_t x, int64_t y) const {
    double sum = 0.0;
    for (size_t i = 0; i < frames_.units.size(); ++i) {
      const FrameUnit& u = frames_.units[i];
      const int64_t b = std::max(x, u.pixel_offset);
      const int64_t e = std::min(y, u.pixel_offset + u.patch_rows);
      if (b >= e) {
        continue;
      }
      const double q = static_cast<double>(e - b);
      const double p = static_cast<double>(u.patch_rows);
      sum += e - b == u.patch_rows ? cost_[i]
                                   : c_ + q * density_[i] + e_ * (p - q);
    }
    return sum;
  }

  /// Minimum over all non-decreasing cut sequences at allowed positions of
  /// the largest rank cost; `prefix` fixes the first cuts (after 0).
  double brute_force_optimum(
      int64_t world, const std::vector<int64_t>& prefix = {}) const {
    double best = std::numeric_limits<double>::infinity();
    std::vector<int64_t> cuts{0};
    cuts.insert(cuts.end(), prefix.begin(), prefix.end());
    double worst = 0.0;
    for (size_t r = 1; r < cuts.size(); ++r) {
      worst = std::max(worst, range_cost(cuts[r - 1], cuts[r]));
    }
    search(world, cuts, worst, best);
    return best;
  }

 private:
  void search(
      int64_t world,
      std::vector<int64_t>& cuts,
      double worst,
      double& best) const {
    if (worst >= best) {
      return;
    }
    const int64_t total = frames_.total_patch_rows;
    if (static_cast<int64_t>(cuts.size()) == world) {
      best = std::min(best, std::max(worst, range_cost(cuts.back(), total)));
      return;
    }
    for (int64_t x : positions_) {
      if (x < cuts.back()) {
        continue;
      }
      const double c = range_cost(cuts.back(), x);
      if (c >= best) {
        break;  // costs only grow with x
      }
      cuts.push_back(x);
      search(world, cuts, std::max(worst, c), best);
      cuts.pop_back();
    }
  }

  const FrameSet& frames_;
  double c_ = 0.0;
  double e_ = 0.0;
  std::vector<double> cost_;
  std::vector<double> density_;
  std::vector<int64_t> grain_;
  std::vector<bool> split_;
  std::vector<int64_t> positions_;
};

inline double relative_gap(double a, double b) {
  return std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), 1e-300});
}

/// Row range [begin, end) of every rank of a split plan, from its pixel
/// ranges (one per non-empty rank).
inline std::vector<int64_t> row_cuts_of(const ShardPlan& plan) {
  std::vector<int64_t> cuts{0};
  for (const RankShard& r : plan.ranks) {
    int64_t end = cuts.back();
    if (!r.pixel_ranges.empty()) {
      EXPECT_EQ(r.pixel_ranges.size(), 1u) << "rank " << r.rank;
      EXPECT_EQ(r.pixel_ranges.front().begin, cuts.back()) << "rank " << r.rank;
      end = r.pixel_ranges.back().end;
    }
    cuts.push_back(end);
  }
  return cuts;
}

// One rank of a split plan ([begin, end) its rows): costs, rows, tokens,
// cu_seqlens, grid, pieces (checked against `covered`, each unit's rows
// covered so far, which it advances) and assignment.
inline void check_split_rank(
    const ShardPlan& plan,
    const SplitModel& model,
    int64_t r,
    int64_t begin,
    int64_t end,
    std::vector<int64_t>& covered) {
  const FrameSet& f = plan.frames;
  const int64_t merge2 =
      f.layout.spatial_merge_size * f.layout.spatial_merge_size;
  const RankShard& rs = plan.ranks[r];
  SCOPED_TRACE("rank " + std::to_string(r));
  EXPECT_TRUE(model.allowed(begin));
  EXPECT_NEAR(
      rs.cost, model.range_cost(begin, end), 1e-9 * std::max(1.0, rs.cost));
  EXPECT_EQ(plan.partition.rank_costs[r], rs.cost);
  EXPECT_EQ(rs.real_patch_rows, end - begin);
  EXPECT_EQ(rs.real_tokens * merge2, rs.real_patch_rows);
  EXPECT_EQ(plan.gather_counts[r], rs.real_tokens);
  EXPECT_EQ(rs.dummy_frames, rs.units.empty() ? 1 : 0);
  EXPECT_EQ(
      rs.cu_seqlens.size(),
      rs.units.size() + static_cast<size_t>(rs.pad_frames + rs.dummy_frames) +
          1);
  EXPECT_EQ(rs.cu_seqlens.back(), rs.local_patch_rows);
  int64_t grid_frames = 0;
  for (const GridThw& g : rs.grid) {
    grid_frames += g.t;
  }
  EXPECT_EQ(
      grid_frames,
      static_cast<int64_t>(rs.units.size()) + rs.pad_frames + rs.dummy_frames);
  int64_t exchange = 0;
  size_t next_piece = 0;
  for (size_t k = 0; k < rs.units.size(); ++k) {
    const int64_t unit = rs.units[k];
    const FrameUnit& u = f.units[unit];
    int64_t b = 0;
    int64_t e = u.patch_rows;
    if (next_piece < rs.pieces.size() &&
        rs.pieces[next_piece].frame == static_cast<int64_t>(k)) {
      b = rs.pieces[next_piece].begin;
      e = rs.pieces[next_piece].end;
      ++next_piece;
      EXPECT_TRUE(b > 0 || e < u.patch_rows);
      EXPECT_TRUE(model.splittable(unit));
      EXPECT_EQ(b % model.grain(unit), 0);
      EXPECT_TRUE(e == u.patch_rows || e % model.grain(unit) == 0);
      EXPECT_EQ(b % merge2, 0);
      EXPECT_EQ(e % merge2, 0);
      exchange += u.patch_rows - (e - b);
    }
    EXPECT_EQ(rs.cu_seqlens[k + 1] - rs.cu_seqlens[k], e - b);
    EXPECT_EQ(covered[unit], b) << "unit " << unit;
    covered[unit] = e;
    if (b == 0) {
      EXPECT_EQ(plan.partition.assignment[unit], r);
    }
  }
  EXPECT_EQ(next_piece, rs.pieces.size());
  EXPECT_EQ(rs.exchange_rows, exchange);
  if (!rs.units.empty()) {
    EXPECT_EQ(plan.partition.cuts[r], rs.units.front());
  }
}

/// Every relation a split plan documents (frameshard/plan.h), recomputed
/// from the frame units and the reference model.
inline void check_split_plan(const ShardPlan& plan, const SplitModel& model) {
  ASSERT_TRUE(plan.split);
  const FrameSet& f = plan.frames;
  const int64_t world = plan.options.world;
  const std::vector<int64_t> cuts = row_cuts_of(plan);
  ASSERT_EQ(static_cast<int64_t>(cuts.size()), world + 1);
  EXPECT_EQ(cuts.back(), f.total_patch_rows);
  EXPECT_TRUE(plan.restore_rows.empty());
  EXPECT_EQ(plan.fingerprint, recompute_fingerprint(plan));
  EXPECT_LT(plan.partition.max_cost(), plan.unsplit_max_cost);
  // Each unit's rows covered so far: the pieces tile it in rank order.
  std::vector<int64_t> covered(f.units.size(), 0);
  int64_t gathered = 0;
  std::vector<int64_t> tokens;
  for (int64_t r = 0; r < world; ++r) {
    check_split_rank(plan, model, r, cuts[r], cuts[r + 1], covered);
    gathered += plan.ranks[r].real_tokens;
    const std::vector<int64_t> mine = encoded_tokens(plan, r);
    EXPECT_EQ(static_cast<int64_t>(mine.size()), plan.ranks[r].real_tokens);
    tokens.insert(tokens.end(), mine.begin(), mine.end());
  }
  for (size_t u = 0; u < f.units.size(); ++u) {
    EXPECT_EQ(covered[u], f.units[u].patch_rows) << "unit " << u;
  }
  EXPECT_EQ(gathered, f.total_tokens);
  std::vector<int64_t> all(static_cast<size_t>(f.total_tokens));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(tokens, all);
}

}  // namespace testing
}  // namespace frameshard
