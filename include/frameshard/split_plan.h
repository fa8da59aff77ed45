// File: frameshard/split_plan.h
//
// Split frames (frame_sharding.split_frames): the partitioner that may cut a
// frame unit into contiguous pieces of its patch rows, so a frame larger
// than a rank's share no longer bounds the plan. make_plan uses it on the
// sharded path with the `optimal` partitioner when options.split.enabled.
//
// Model. Frame unit i has p_i patch rows and whole cost C_i = cost(p_i) (the
// CostModel of frameshard/cost.h, a p^2 + b p + c + wc p min(p, window)),
// written C_i = c + p_i d_i with the per-row density d_i = (C_i - c) / p_i.
// A piece of q < p_i rows costs
//   piece(i, q) = c + q d_i + e (p_i - q),      e = split.exchange_row_cost,
// because its queries still attend to the whole frame (q a p_i of attention
// work, inside q d_i) and it receives the frame's other p_i - q K/V rows per
// full-attention layer. The pieces of a frame cost the frame's cost plus c
// and the exchange per extra piece, never less. Cuts inside frame i lie at
// multiples of the grain g_i from the frame start: g_i = merge^2 (whole
// merged tokens), or window_side * w_i when split.window_side > 0 (bands of
// window_side patch rows: the processor orders rows in merge x merge windows
// row-major, so such a band is window_side * w_i contiguous rows and window
// layers need no communication). Frame i is splittable iff d_i > e and
// p_i >= 2 g_i; others are never cut.
//
// Every rank holds one contiguous range of the batch's patch rows (frame
// order is kept): a head piece (if it starts inside a frame), whole frames
// and a tail piece (or one middle piece inside a single frame). Its cost is
// the sum of those parts. Since d_i > e, a range costs no more than any
// range containing it, so the greedy probe (from a position, extend as far
// as the cost stays <= T) decides exactly whether a bottleneck T is
// feasible. The planner bisects T between total/world (a lower bound: the
// pieces never cost less than their frame) and the unsplit optimum
// (optimal_bottleneck), moving the upper end to the largest range cost the
// probe realized and the lower end to the smallest cost at which the probe
// would change (Pinar & Aykanat's realizable bounds), until they meet or are
// within a relative 1e-12 (at most kSplitBisectionSteps probes).
//
// What is optimal: max rank cost = the minimum over all contiguous row
// partitions with cuts at allowed positions, up to relative 1e-12 and
// floating-point rounding of the prefix sums (tested against brute force).
// Then, at that bottleneck T*, cut r (left to right) is chosen among the
// positions that keep rank r - 1 <= T* and let the rest fit in the remaining
// ranks, preferring a non-empty rank, then a frame boundary (the one whose
// prefix cost is closest to total*r/world), and only when no boundary is
// possible an interior position (closest to the same target). So a frame is
// cut only where T* requires it. The split is used only when it helps enough
// on the model: T* + F <= unsplit optimum * (1 - split.min_gain) (and
// strictly below it by a relative 1e-9 when min_gain is 0), where F =
// split.exchange_fixed_cost is the exchanges' fixed latency that every rank
// of a split plan pays (so F moves no cut, and the split plan's rank costs
// include it); otherwise the plan is exactly the unsplit one.
//
// Usage:
//   frameshard::FrameSet fs = frameshard::expand_frames({{1, 128, 128}});
//   frameshard::PlanOptions o;
//   o.world = 4;
//   o.split.enabled = true;
//   frameshard::SplitPartition sp = frameshard::split_partition(fs, o);
//   // sp.split == true, sp.row_cuts == {0, 4096, 8192, 12288, 16384}
//
// Pure functions, thread-safe.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/plan.h>

#include <cstdint>
#include <vector>

namespace frameshard {

/// Most bisection probes split_partition runs.
constexpr int kSplitBisectionSteps = 100;

/// The row grain g of `unit`'s interior cuts (see the banner).
int64_t split_grain(
    const FrameUnit& unit, const MediaLayout& layout, const SplitOptions& s);

/// Whether the split planner may cut `unit`: density > exchange_row_cost
/// and at least two grains of rows.
bool splittable(
    const FrameUnit& unit,
    double unit_cost,
    const CostModel& cost,
    const MediaLayout& layout,
    const SplitOptions& s);

/// Cost of a piece of `rows` rows of `unit` (rows == patch_rows: the whole
/// frame's cost, `unit_cost`).
double piece_cost(
    const FrameUnit& unit,
    double unit_cost,
    int64_t rows,
    const CostModel& cost,
    const SplitOptions& s);

struct SplitPartition {
  /// world + 1 row positions into the batch's patch rows: rank r holds rows
  /// [row_cuts[r], row_cuts[r + 1]). Frame boundaries or allowed interior
  /// positions; non-decreasing, row_cuts[0] = 0, row_cuts[world] = total.
  std::vector<int64_t> row_cuts;
  std::vector<double> rank_costs;  // per rank (model above; + F if split)
  double max_cost = 0.0;           // max of rank_costs
  double unsplit_max_cost = 0.0;   // optimal_bottleneck of the unit costs
  /// True when the split strictly helps (some frame is cut); otherwise
  /// row_cuts are the unsplit optimal partition's frame boundaries.
  bool split = false;
};

/// The split partition of `frames` over options.world ranks with
/// options.cost, options.split and options.layout (the planner above).
/// `unit_costs` may be given (cost of each unit, as make_plan computes
/// them); empty: computed from options.cost.
SplitPartition split_partition(
    const FrameSet& frames,
    const PlanOptions& options,
    const std::vector<double>& unit_costs = {});

}  // namespace frameshard
