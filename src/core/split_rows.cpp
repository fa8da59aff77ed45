// The row-level view of a batch for the split partitioner
// (core/split_rows.h).
#include "core/split_rows.h"

#include <frameshard/error.h>
#include <frameshard/split_plan.h>

#include <algorithm>
#include <cmath>

namespace frameshard {
namespace internal {

SplitRows::SplitRows(
    const FrameSet& frames,
    const PlanOptions& options,
    const std::vector<double>& unit_costs)
    : c_(options.cost.c), e_(options.split.exchange_row_cost) {
  const size_t n = frames.units.size();
  if (unit_costs.empty()) {
    unit_costs_.reserve(n);
    for (const FrameUnit& u : frames.units) {
      unit_costs_.push_back(options.cost(u.patch_rows));
    }
  } else {
    FRAMESHARD_CHECK(
        unit_costs.size() == n,
        "split_partition",
        "expected one unit cost per frame unit (",
        n,
        "), got ",
        unit_costs.size());
    unit_costs_ = unit_costs;
  }
  row_.assign(n + 1, 0);
  cost_.assign(n + 1, 0.0);
  density_.resize(n);
  grain_.resize(n);
  last_cut_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const FrameUnit& u = frames.units[i];
    row_[i + 1] = row_[i] + u.patch_rows;
    cost_[i + 1] = cost_[i] + unit_costs_[i];
    density_[i] = (unit_costs_[i] - c_) / static_cast<double>(u.patch_rows);
    grain_[i] = split_grain(u, frames.layout, options.split);
    if (splittable(
            u, unit_costs_[i], options.cost, frames.layout, options.split)) {
      last_cut_[i] = (u.patch_rows - 1) / grain_[i] * grain_[i];
      any_splittable_ = true;
    }
  }
}

int64_t SplitRows::unit_at(int64_t x) const {
  return static_cast<int64_t>(
             std::upper_bound(row_.begin(), row_.end(), x) - row_.begin()) -
         1;
}

double SplitRows::piece(int64_t i, int64_t q) const {
  const double p = static_cast<double>(rows_of(i));
  const double rows = static_cast<double>(q);
  return c_ + rows * density_[i] + e_ * (p - rows);
}

double SplitRows::range_cost(int64_t x, int64_t y) const {
  if (x >= y) {
    return 0.0;
  }
  const int64_t i = unit_at(x);
  const int64_t oi = x - row_[i];
  const int64_t j = unit_at(y - 1);
  const int64_t oj = y - row_[j];
  const bool head = oi > 0;
  const bool tail = oj < rows_of(j);
  if (i == j && (head || tail)) {
    return piece(i, y - x);
  }
  const int64_t first = head ? i + 1 : i;
  const int64_t last = tail ? j : j + 1;
  const double head_cost = head ? piece(i, rows_of(i) - oi) : 0.0;
  const double tail_cost = tail ? piece(j, oj) : 0.0;
  return (head_cost + (cost_[last] - cost_[first])) + tail_cost;
}

int64_t SplitRows::next_pos(int64_t x) const {
  const int64_t i = unit_at(x);
  const int64_t o = x - row_[i];
  if (last_cut_[i] > 0 && o + grain_[i] <= last_cut_[i]) {
    return x + grain_[i];
  }
  return row_[i + 1];
}

int64_t SplitRows::fit_grains(int64_t i, double budget) const {
  const double p = static_cast<double>(rows_of(i));
  const double rows = (budget - c_ - e_ * p) / (density_[i] - e_);
  const double grains = std::floor(rows / static_cast<double>(grain_[i]));
  if (!(grains > 0.0)) {
    return 0;
  }
  return grains >= p ? rows_of(i) : static_cast<int64_t>(grains);
}

int64_t SplitRows::forward_end(int64_t x, double bound) const {
  const int64_t n = static_cast<int64_t>(density_.size());
  if (x >= total_rows()) {
    return x;
  }
  const int64_t i = unit_at(x);
  const int64_t oi = x - row_[i];
  double head = 0.0;
  int64_t first = i;
  if (oi > 0) {
    head = piece(i, rows_of(i) - oi);
    if (head > bound) {
      // One middle piece of frame i, ending before the frame does.
      const int64_t g = grain_[i];
      const int64_t kmax = (rows_of(i) - oi - 1) / g;
      // range_cost(x, x + k g), as range_cost computes it.
      int64_t k = std::min(fit_grains(i, bound), kmax);
      while (k > 0 && piece(i, k * g) > bound) {
        --k;
      }
      while (k < kmax && piece(i, (k + 1) * g) <= bound) {
        ++k;
      }
      return x + k * g;
    }
    first = i + 1;
  }
  // Whole frames: the last `last` with head + cost[first, last) <= bound
  // (range_cost's own expression, so the two agree).
  int64_t lo = first;
  int64_t hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (head + (cost_[mid] - cost_[first]) <= bound) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t last = lo;
  if (last < n && last_cut_[last] > 0) {
    // A tail piece of frame `last`.
    const double before = head + (cost_[last] - cost_[first]);
    const int64_t g = grain_[last];
    const int64_t kmax = last_cut_[last] / g;
    const int64_t base = row_[last];
    // range_cost(x, base + k g), as range_cost computes it.
    auto cost = [&](int64_t k) { return before + piece(last, k * g); };
    int64_t k = std::min(fit_grains(last, bound - before), kmax);
    while (k > 0 && cost(k) > bound) {
      --k;
    }
    while (k < kmax && cost(k + 1) <= bound) {
      ++k;
    }
    return base + k * g;
  }
  return row_[last];
}

int64_t SplitRows::backward_start(int64_t y, double bound) const {
  if (y <= 0) {
    return y;
  }
  const int64_t j = unit_at(y - 1);
  const int64_t oj = y - row_[j];
  double tail = 0.0;
  int64_t last = j + 1;
  if (oj < rows_of(j)) {
    tail = piece(j, oj);
    if (tail > bound) {
      // One middle piece of frame j, starting after the frame does.
      const int64_t g = grain_[j];
      const int64_t kmax = (oj - 1) / g;
      // range_cost(y - k g, y), as range_cost computes it.
      int64_t k = std::min(fit_grains(j, bound), kmax);
      while (k > 0 && piece(j, k * g) > bound) {
        --k;
      }
      while (k < kmax && piece(j, (k + 1) * g) <= bound) {
        ++k;
      }
      return y - k * g;
    }
    last = j;
  }
  // Whole frames: the first `first` with cost[first, last) + tail <= bound.
  int64_t lo = 0;
  int64_t hi = last;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if ((0.0 + (cost_[last] - cost_[mid])) + tail <= bound) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int64_t first = lo;
  if (first > 0 && last_cut_[first - 1] > 0) {
    // A head piece of frame h: the smallest offset o (in grains) with
    // range_cost(row[h] + o, y) <= bound.
    const int64_t h = first - 1;
    const int64_t g = grain_[h];
    const int64_t kmax = last_cut_[h] / g;
    const double before = (cost_[last] - cost_[first]) + tail;
    const int64_t fit = fit_grains(h, bound - before);
    // q <= fit * g rows: o >= p - fit * g, rounded up to a grain.
    const int64_t p = rows_of(h);
    // range_cost(row[h] + k g, y), as range_cost computes it.
    const double whole = cost_[last] - cost_[first];
    auto cost = [&](int64_t k) { return (piece(h, p - k * g) + whole) + tail; };
    int64_t k = fit * g >= p ? 1 : (p - fit * g + g - 1) / g;
    k = std::max<int64_t>(1, std::min(k, kmax + 1));
    while (k <= kmax && cost(k) > bound) {
      ++k;
    }
    while (k > 1 && cost(k - 1) <= bound) {
      --k;
    }
    if (k <= kmax && cost(k) <= bound) {
      return row_[h] + k * g;
    }
  }
  return row_[first];
}

}  // namespace internal
}  // namespace frameshard
