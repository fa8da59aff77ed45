// File: core/split_rows.h
//
// !!! Internal header of frameshard::core, not installed. !!!
//
// The row-level view of a batch the split partitioner works on
// (frameshard/split_plan.h has the model): positions are rows of the packed
// patch rows (0 .. total_rows), allowed at frame boundaries and at multiples
// of a splittable frame's grain inside it. range_cost(x, y) is the cost of
// one rank holding rows [x, y); the greedy steps extend a range as far as
// its cost stays within a bound, checking every step against range_cost
// itself so the probe, the placement and the reported costs agree exactly.
//
// Usage:
//   internal::SplitRows rows(frames, options, {});
//   int64_t y = rows.forward_end(0, bound);   // rank 0 holds [0, y)
//   double c = rows.range_cost(0, y);         // <= bound
#pragma once

#include <frameshard/frames.h>
#include <frameshard/plan.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace internal {

class SplitRows {
 public:
  /// `unit_costs` empty: computed from options.cost.
  SplitRows(
      const FrameSet& frames,
      const PlanOptions& options,
      const std::vector<double>& unit_costs);

  int64_t total_rows() const {
    return row_.back();
  }
  /// Rows before unit i (n + 1 entries).
  const std::vector<int64_t>& row_prefix() const {
    return row_;
  }
  /// Whole-unit costs before unit i (n + 1 entries).
  const std::vector<double>& cost_prefix() const {
    return cost_;
  }
  const std::vector<double>& unit_costs() const {
    return unit_costs_;
  }
  bool any_splittable() const {
    return any_splittable_;
  }
  int64_t grain(int64_t unit) const {
    return grain_[unit];
  }
  double density(int64_t unit) const {
    return density_[unit];
  }
  /// Last allowed interior offset of `unit`; 0 when it is not splittable.
  int64_t last_cut(int64_t unit) const {
    return last_cut_[unit];
  }

  /// Unit holding row x (n for x == total_rows).
  int64_t unit_at(int64_t x) const;
  /// Cost of a piece of q rows of unit i (q < its rows).
  double piece(int64_t i, int64_t q) const;
  /// Cost of one rank holding rows [x, y) (allowed positions, x <= y).
  double range_cost(int64_t x, int64_t y) const;
  /// The allowed position after x (< total_rows).
  int64_t next_pos(int64_t x) const;
  /// The farthest allowed y >= x with range_cost(x, y) <= bound (x when
  /// even one step exceeds it).
  int64_t forward_end(int64_t x, double bound) const;
  /// The earliest allowed x <= y with range_cost(x, y) <= bound (y when
  /// even one step exceeds it).
  int64_t backward_start(int64_t y, double bound) const;

 private:
  int64_t rows_of(int64_t i) const {
    return row_[i + 1] - row_[i];
  }
  // Whole grains of a piece of unit i costing at most `budget`, from the
  // closed form q = (budget - c - e p) / (d - e) (may be off by one grain
  // by rounding; callers check with range_cost).
  int64_t fit_grains(int64_t i, double budget) const;

  std::vector<int64_t> row_;
  std::vector<double> cost_;
  std::vector<double> unit_costs_;
  std::vector<double> density_;
  std::vector<int64_t> grain_;
  std::vector<int64_t> last_cut_;
  double c_ = 0.0;
  double e_ = 0.0;
  bool any_splittable_ = false;
};

}  // namespace internal
}  // namespace frameshard
