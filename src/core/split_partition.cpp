// The split partitioner (frameshard/split_plan.h): bisection over the
// bottleneck with a greedy row-level probe, then balanced cut placement.
#include <frameshard/error.h>
#include <frameshard/partition.h>
#include <frameshard/split_plan.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/split_rows.h"

namespace frameshard {

namespace {

// Bisection stops when hi - lo <= kRelativeTolerance * hi.
constexpr double kRelativeTolerance = 1e-12;
// The split must beat the unsplit optimum by this relative margin: below it
// the difference is rounding, and the plain plan is simpler to run.
constexpr double kHelpMargin = 1e-9;

using internal::SplitRows;

struct SplitProbe {
  bool feasible = false;
  double max_cost = 0.0;  // largest range cost the greedy produced
  // Smallest cost of a greedy range extended by one allowed step: the next
  // bound at which the greedy changes (a proven lower bound when it fails).
  double min_next = std::numeric_limits<double>::infinity();
};

// Greedy left to right; `ends` (scratch, world + 1) receives the range ends.
// Only the figure the bisection uses is computed: the realized maximum when
// feasible, the next bound at which the greedy changes otherwise.
SplitProbe split_probe(
    const SplitRows& rows,
    int64_t world,
    double bound,
    std::vector<int64_t>& ends) {
  SplitProbe r;
  const int64_t total = rows.total_rows();
  ends.assign(1, 0);
  for (int64_t b = 0; b < world && ends.back() < total; ++b) {
    const int64_t x = ends.back();
    const int64_t y = rows.forward_end(x, bound);
    ends.push_back(y);
    if (y == x) {
      break;  // one step from x already exceeds the bound
    }
  }
  r.feasible = ends.back() == total;
  for (size_t b = 0; b + 1 < ends.size(); ++b) {
    if (r.feasible) {
      r.max_cost = std::max(r.max_cost, rows.range_cost(ends[b], ends[b + 1]));
    } else if (ends[b + 1] < total) {
      const int64_t next = rows.next_pos(ends[b + 1]);
      r.min_next = std::min(r.min_next, rows.range_cost(ends[b], next));
    }
  }
  return r;
}

// The minimum bottleneck over allowed row partitions, given a feasible
// upper bound `hi` and a lower bound `lo`.
double split_bottleneck(
    const SplitRows& rows, int64_t world, double lo, double hi) {
  std::vector<int64_t> ends;
  ends.reserve(static_cast<size_t>(world) + 1);
  for (int step = 0; step < kSplitBisectionSteps; ++step) {
    if (!(hi - lo > kRelativeTolerance * hi)) {
      break;
    }
    const double mid = lo + (hi - lo) / 2.0;
    const SplitProbe p = split_probe(rows, world, mid, ends);
    if (p.feasible) {
      hi = std::min(hi, p.max_cost);
    } else {
      lo = std::min(std::max(mid, p.min_next), hi);
    }
  }
  return hi;
}

// The allowed position in [lo, hi] for cut r: a frame boundary whose prefix
// cost is closest to `target` (the lower one on a tie) if there is one,
// else the interior position of the one frame holding [lo, hi] closest to it.
int64_t place_cut(
    const SplitRows& rows, int64_t lo, int64_t hi, double target) {
  const std::vector<int64_t>& row = rows.row_prefix();
  const std::vector<double>& P = rows.cost_prefix();
  const int64_t j1 = std::lower_bound(row.begin(), row.end(), lo) - row.begin();
  const int64_t j2 =
      (std::upper_bound(row.begin(), row.end(), hi) - row.begin()) - 1;
  if (j1 <= j2) {
    int64_t j = std::lower_bound(P.begin() + j1, P.begin() + j2 + 1, target) -
                P.begin();
    if (j > j2 || (j > j1 && target - P[j - 1] <= P[j] - target)) {
      j -= 1;
    }
    return row[j];
  }
  const int64_t i = rows.unit_at(lo);
  const int64_t g = rows.grain(i);
  const double want = (target - P[i]) / std::max(rows.density(i), 1e-300);
  const double grains = std::floor(want / static_cast<double>(g) + 0.5);
  const int64_t olo = lo - row[i];
  const int64_t ohi = hi - row[i];
  int64_t o = olo;
  if (grains * static_cast<double>(g) >= static_cast<double>(ohi)) {
    o = ohi;
  } else if (grains * static_cast<double>(g) > static_cast<double>(olo)) {
    o = static_cast<int64_t>(grains) * g;
  }
  return row[i] + o;
}

// Cuts at bottleneck `bound`: latest[m] is the earliest position from which
// the suffix fits in m ranks (right-to-left greedy); cut r lies between it
// and the farthest reach of rank r - 1.
std::vector<int64_t> place_cuts(
    const SplitRows& rows, int64_t world, double bound) {
  const int64_t total = rows.total_rows();
  std::vector<int64_t> suffix(static_cast<size_t>(world), 0);
  suffix[0] = total;
  for (int64_t m = 1; m < world; ++m) {
    const int64_t y = suffix[m - 1];
    suffix[m] = y == 0 ? 0 : rows.backward_start(y, bound);
  }
  const double cost_total = rows.cost_prefix().back();
  std::vector<int64_t> cuts(static_cast<size_t>(world + 1), 0);
  cuts[world] = total;
  for (int64_t r = 1; r < world; ++r) {
    const int64_t prev = cuts[r - 1];
    const int64_t reach = prev < total ? rows.forward_end(prev, bound) : total;
    int64_t lo = std::max(suffix[world - r], prev);
    // An empty rank only when nothing else fits.
    if (prev < total) {
      const int64_t next = std::max(lo, rows.next_pos(prev));
      if (next <= reach) {
        lo = next;
      }
    }
    const int64_t hi = std::max(reach, lo);  // reach < lo only by rounding
    const double target =
        cost_total * static_cast<double>(r) / static_cast<double>(world);
    cuts[r] = place_cut(rows, lo, hi, target);
  }
  return cuts;
}

void check_split_options(const PlanOptions& o) {
  const char* fn = "split_partition";
  FRAMESHARD_CHECK(
      o.world >= 1 && o.world <= kMaxWorld,
      fn,
      "expected options.world in [1, ",
      kMaxWorld,
      "], got ",
      o.world);
  const double e = o.split.exchange_row_cost;
  FRAMESHARD_CHECK(
      std::isfinite(e) && e >= 0.0,
      fn,
      "expected options.split.exchange_row_cost finite and >= 0, got ",
      e);
  const double g = o.split.min_gain;
  FRAMESHARD_CHECK(
      std::isfinite(g) && g >= 0.0 && g < 1.0,
      fn,
      "expected options.split.min_gain in [0, 1), got ",
      g);
  const double f = o.split.exchange_fixed_cost;
  FRAMESHARD_CHECK(
      std::isfinite(f) && f >= 0.0,
      fn,
      "expected options.split.exchange_fixed_cost finite and >= 0, got ",
      f);
  const int64_t merge = o.layout.spatial_merge_size;
  FRAMESHARD_CHECK(
      o.split.window_side >= 0 &&
          (merge <= 0 || o.split.window_side % merge == 0),
      fn,
      "expected options.split.window_side >= 0 and a multiple of "
      "spatial_merge_size ",
      merge,
      ", got ",
      o.split.window_side);
}

}  // namespace

int64_t split_grain(
    const FrameUnit& unit, const MediaLayout& layout, const SplitOptions& s) {
  if (s.window_side > 0) {
    return s.window_side * unit.w;
  }
  return layout.spatial_merge_size * layout.spatial_merge_size;
}

bool splittable(
    const FrameUnit& unit,
    double unit_cost,
    const CostModel& cost,
    const MediaLayout& layout,
    const SplitOptions& s) {
  const double density =
      (unit_cost - cost.c) / static_cast<double>(unit.patch_rows);
  return density > s.exchange_row_cost &&
         unit.patch_rows >= 2 * split_grain(unit, layout, s);
}

double piece_cost(
    const FrameUnit& unit,
    double unit_cost,
    int64_t rows,
    const CostModel& cost,
    const SplitOptions& s) {
  if (rows >= unit.patch_rows) {
    return unit_cost;
  }
  const double p = static_cast<double>(unit.patch_rows);
  const double q = static_cast<double>(rows);
  const double density = (unit_cost - cost.c) / p;
  return cost.c + q * density + s.exchange_row_cost * (p - q);
}

SplitPartition split_partition(
    const FrameSet& frames,
    const PlanOptions& options,
    const std::vector<double>& unit_costs) {
  check_split_options(options);
  const int64_t world = options.world;
  const SplitRows rows(frames, options, unit_costs);
  const std::vector<double>& P = rows.cost_prefix();
  const int64_t n = static_cast<int64_t>(frames.units.size());

  // The unsplit optimum: the upper bound, and the plan when splitting does
  // not help.
  const Partition unsplit =
      partition_costs(rows.unit_costs(), world, Partitioner::kOptimal);
  SplitPartition out;
  out.unsplit_max_cost = unsplit.max_cost();
  double best = out.unsplit_max_cost;
  if (rows.any_splittable() && world > 1 && best > 0.0) {
    const double lo = P[n] / static_cast<double>(world);
    best = split_bottleneck(rows, world, lo, best);
  }
  // A cut must buy at least min_gain of the bottleneck after paying the
  // exchanges' fixed latency (the same on every rank, so it does not move
  // the optimum's cuts), and always strictly more than rounding.
  const double fixed = options.split.exchange_fixed_cost;
  const double keep = out.unsplit_max_cost * (1.0 - options.split.min_gain);
  if (best + fixed <= keep &&
      best + fixed < out.unsplit_max_cost * (1.0 - kHelpMargin)) {
    out.split = true;
    out.row_cuts = place_cuts(rows, world, best);
  } else {
    out.row_cuts.resize(static_cast<size_t>(world + 1));
    for (int64_t r = 0; r <= world; ++r) {
      out.row_cuts[r] = rows.row_prefix()[unsplit.cuts[r]];
    }
  }
  out.rank_costs.resize(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    out.rank_costs[r] = rows.range_cost(out.row_cuts[r], out.row_cuts[r + 1]) +
                        (out.split ? fixed : 0.0);
    out.max_cost = std::max(out.max_cost, out.rank_costs[r]);
  }
  return out;
}

}  // namespace frameshard
