#include <frameshard/error.h>
#include <frameshard/partition.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>
#include <utility>

namespace frameshard {

namespace {

// All block sums below are taken as differences P[e] - P[s] of one prefix
// array. Correctly rounded subtraction is monotone in both arguments, so the
// probe, the bisection bounds and the tie rule agree on every comparison even
// when costs are not integers (with integer costs every sum is exact).

void check_world(int64_t world, const char* fn) {
  FRAMESHARD_CHECK(world >= 1, fn, "expected world >= 1, got ", world);
  // The partitioners allocate per rank.
  FRAMESHARD_CHECK(
      world <= kMaxWorld,
      fn,
      "expected world in [1, ",
      kMaxWorld,
      "], got ",
      world);
}

// Prefix sums P[0..n] of validated costs. The check rides along the
// latency-bound running sum for free; the culprit is located only when
// something is wrong (NaN fails both comparisons).
std::vector<double> checked_prefix_sums(
    const std::vector<double>& costs, const char* fn) {
  std::vector<double> p(costs.size() + 1);
  p[0] = 0.0;
  bool ok = true;
  for (size_t i = 0; i < costs.size(); ++i) {
    const double c = costs[i];
    ok &= (c >= 0.0) & (c <= std::numeric_limits<double>::max());
    p[i + 1] = p[i] + c;
  }
  if (!ok) {
    for (size_t i = 0; i < costs.size(); ++i) {
      FRAMESHARD_CHECK(
          std::isfinite(costs[i]) && costs[i] >= 0.0,
          fn,
          "expected costs[",
          i,
          "] finite and >= 0, got ",
          costs[i]);
    }
  }
  return p;
}

// Largest e in [lo, hi] with P[e] - base <= bound, given that lo fits.
// Branch-free halving: the comparisons are data-dependent and mispredict
// about half the time in a branching search.
inline int64_t last_fit(
    const double* P, double base, double bound, int64_t lo, int64_t hi) {
  const double* first = P + lo;
  int64_t len = hi - lo + 1;
  while (len > 1) {
    const int64_t half = len / 2;
    first = (first[half] - base <= bound) ? first + half : first;
    len -= half;
  }
  return first - P;
}

// Largest e in [lo, hi] with P[e] - base <= bound, given that lo fits and
// that the answer is usually near where P crosses base + bound: guess it by
// interpolation, gallop to bracket it, then halve. Prefix sums are close to
// linear over a block, so this takes a few comparisons instead of log2(n).
inline int64_t find_end(
    const double* P, double base, double bound, int64_t lo, int64_t hi) {
  auto fits = [&](int64_t e) { return P[e] - base <= bound; };
  if (lo == hi || fits(hi)) {
    return hi;
  }
  // Now fits(lo) and !fits(hi).
  const double span = P[hi] - P[lo];
  const double frac = span > 0.0 ? (base + bound - P[lo]) / span : 0.0;
  int64_t g = lo + static_cast<int64_t>(
                       std::min(std::max(frac, 0.0), 1.0) *
                       static_cast<double>(hi - lo));
  g = std::min(std::max(g, lo + 1), hi - 1);
  if (g <= lo) {
    return lo;  // hi == lo + 1
  }
  int64_t step = 1;
  if (fits(g)) {
    lo = g;
    while (lo + step < hi) {
      if (!fits(lo + step)) {
        hi = lo + step;
        break;
      }
      lo += step;
      step *= 2;
    }
  } else {
    hi = g;
    while (hi - step > lo) {
      if (fits(hi - step)) {
        lo = hi - step;
        break;
      }
      hi -= step;
      step *= 2;
    }
  }
  return last_fit(P, base, bound, lo, hi - 1);
}

// Smallest s in [lo, hi] with top - P[s] <= bound, given that hi fits: the
// mirror image of find_end, for the right-to-left greedy.
inline int64_t find_start(
    const double* P, double top, double bound, int64_t lo, int64_t hi) {
  auto fits = [&](int64_t s) { return top - P[s] <= bound; };
  if (lo == hi || fits(lo)) {
    return lo;
  }
  // Now !fits(lo) and fits(hi).
  const double span = P[hi] - P[lo];
  const double frac = span > 0.0 ? (top - bound - P[lo]) / span : 1.0;
  int64_t g = lo + static_cast<int64_t>(
                       std::min(std::max(frac, 0.0), 1.0) *
                       static_cast<double>(hi - lo));
  g = std::min(std::max(g, lo + 1), hi - 1);
  if (g <= lo) {
    return hi;  // hi == lo + 1
  }
  int64_t step = 1;
  if (fits(g)) {
    hi = g;
    while (hi - step > lo) {
      if (!fits(hi - step)) {
        lo = hi - step;
        break;
      }
      hi -= step;
      step *= 2;
    }
  } else {
    lo = g;
    while (lo + step < hi) {
      if (fits(lo + step)) {
        hi = lo + step;
        break;
      }
      lo += step;
      step *= 2;
    }
  }
  // Last index in [lo, hi - 1] that does not fit, plus one.
  const double* first = P + lo;
  int64_t len = hi - lo;
  while (len > 1) {
    const int64_t half = len / 2;
    first = (top - first[half] > bound) ? first + half : first;
    len -= half;
  }
  return (first - P) + 1;
}

// Smallest j in [lo, hi + 1) with P[j] >= target (hi + 1 when none).
inline int64_t lower_bound_index(
    const double* P, double target, int64_t lo, int64_t hi) {
  const double* first = P + lo;
  int64_t len = hi - lo + 1;
  while (len > 0) {
    const int64_t half = len / 2;
    if (first[half] < target) {
      first += half + 1;
      len -= half + 1;
    } else {
      len = half;
    }
  }
  return first - P;
}

struct Probe {
  bool feasible = false;
  double max_block = 0.0;  // largest block sum produced
  // Smallest "block sum + the unit that did not fit": the next bound at
  // which the greedy changes (infinite when feasible).
  double min_next = std::numeric_limits<double>::infinity();
};

// Greedy left to right: each block takes the longest prefix <= bound. The
// end of block b is non-decreasing in the bound, so a probe at a bound
// between two earlier probes only searches between their ends
// (low_end[b]..high_end[b]); ends[] receives this probe's block ends (n for
// blocks left unused).
Probe probe(
    const double* P,
    int64_t n,
    int64_t k,
    double bound,
    const int64_t* low_end,
    const int64_t* high_end,
    int64_t* ends) {
  Probe r;
  int64_t pos = 0;
  for (int64_t b = 0; b < k; ++b) {
    if (pos == n) {
      ends[b] = n;
      continue;
    }
    const double base = P[pos];
    int64_t lo = std::max(pos, low_end[b]);
    int64_t hi = std::max(lo, std::min(high_end[b], n));
    if (P[lo] - base > bound) {
      lo = pos;  // cannot happen with valid bounds; stay exact regardless
    }
    if (hi < n && P[hi + 1] - base <= bound) {
      hi = n;
    }
    const int64_t end = find_end(P, base, bound, lo, hi);
    if (end < n) {
      r.min_next = std::min(r.min_next, P[end + 1] - base);
    }
    if (end == pos) {
      // One unit alone exceeds the bound. Later blocks end at or after pos
      // under any larger bound, which keeps ends[] valid as lower bounds.
      std::fill(ends + b, ends + k, pos);
      return r;
    }
    r.max_block = std::max(r.max_block, P[end] - base);
    ends[b] = end;
    pos = end;
  }
  r.feasible = pos == n;
  return r;
}

// Exact bisection over realizable block sums (Pinar & Aykanat): hi is always
// a block sum of a feasible probe, lo never exceeds the optimum, and each
// step moves one of them to a realizable value past the midpoint.
double bottleneck_from_prefix(const std::vector<double>& P, int64_t k) {
  const int64_t n = static_cast<int64_t>(P.size()) - 1;
  if (n == 0) {
    return 0.0;
  }
  // Four accumulators: a single running max is one long dependency chain.
  double m4[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      m4[j] = std::max(m4[j], P[i + j + 1] - P[i + j]);
    }
  }
  for (; i < n; ++i) {
    m4[0] = std::max(m4[0], P[i + 1] - P[i]);
  }
  const double max_unit =
      std::max(std::max(m4[0], m4[1]), std::max(m4[2], m4[3]));
  const double total = P[n];
  const size_t ks = static_cast<size_t>(k);
  // Block-end bounds from the latest infeasible (low) and feasible (high)
  // probes, plus scratch for the current one.
  std::vector<int64_t> low(ks, 0), high(ks, n), cur(ks, 0);

  double lo = std::max(max_unit, total / static_cast<double>(k));
  Probe r = probe(P.data(), n, k, lo, low.data(), high.data(), cur.data());
  if (r.feasible) {
    return r.max_block;
  }
  lo = r.min_next;
  low.swap(cur);
  // Find a feasible upper bound by probing lo + delta with a growing delta,
  // starting at the mean unit cost: real batches are within a few percent
  // of total / k, so this usually takes one probe and leaves a narrow
  // bracket. lo + max_unit (lo >= total / k) is always feasible and caps
  // delta; one block holding everything is the fallback against rounding.
  double delta = total / static_cast<double>(n);
  double hi = 0.0;
  while (true) {
    const bool last = delta >= max_unit;
    r = probe(
        P.data(),
        n,
        k,
        lo + (last ? max_unit : delta),
        low.data(),
        high.data(),
        cur.data());
    if (!r.feasible && last) {
      std::fill(low.begin(), low.end(), 0);
      r = probe(P.data(), n, k, total, low.data(), high.data(), cur.data());
      if (!r.feasible) {
        throw std::logic_error(detail::error_message(
            "optimal_bottleneck", "internal error: no feasible bound"));
      }
    }
    if (r.feasible) {
      hi = r.max_block;
      high.swap(cur);
      break;
    }
    lo = r.min_next;
    low.swap(cur);
    delta *= 2.0;
  }

  for (int iter = 0; lo < hi; ++iter) {
    if (iter > 4096) {
      throw std::logic_error(detail::error_message(
          "optimal_bottleneck", "internal error: bisection did not converge"));
    }
    double mid = lo + (hi - lo) / 2.0;
    if (!(mid > lo && mid < hi)) {
      mid = lo;  // lo and hi are adjacent doubles: settle on one of them
    }
    r = probe(P.data(), n, k, mid, low.data(), high.data(), cur.data());
    if (r.feasible) {
      hi = r.max_block;
      high.swap(cur);
    } else {
      lo = r.min_next;
      low.swap(cur);
    }
  }
  return hi;
}

// Contiguous partitions take their rank costs from the same prefix sums the
// optimum was computed on, so max_cost() equals optimal_bottleneck() exactly.
Partition finish_contiguous(
    Partitioner method,
    int64_t world,
    const std::vector<double>& P,
    std::vector<int64_t> cuts) {
  Partition p;
  p.method = method;
  p.world = world;
  const int64_t n = static_cast<int64_t>(P.size()) - 1;
  p.rank_costs.assign(static_cast<size_t>(world), 0.0);
  p.assignment.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < world; ++r) {
    std::fill(
        p.assignment.begin() + cuts[r], p.assignment.begin() + cuts[r + 1], r);
    p.rank_costs[r] = P[cuts[r + 1]] - P[cuts[r]];
  }
  p.cuts = std::move(cuts);
  return p;
}

std::vector<int64_t> optimal_cuts(const std::vector<double>& P, int64_t k) {
  const int64_t n = static_cast<int64_t>(P.size()) - 1;
  const double best = bottleneck_from_prefix(P, k);
  const double total = P[n];
  const double* p = P.data();

  // suffix_start[m]: the earliest start s such that [s, n) fits in m blocks
  // of at most `best` (right-to-left greedy).
  std::vector<int64_t> suffix_start(static_cast<size_t>(k), 0);
  suffix_start[0] = n;
  for (int64_t m = 1; m < k; ++m) {
    const int64_t end = suffix_start[m - 1];
    suffix_start[m] = end == 0 ? 0 : find_start(p, P[end], best, 0, end);
  }

  std::vector<int64_t> cuts(static_cast<size_t>(k + 1), 0);
  cuts[k] = n;
  int64_t prev = 0;
  for (int64_t r = 1; r < k; ++r) {
    // Feasible cuts: block [prev, j) non-empty and <= best, the suffix fits
    // in the remaining k - r blocks and leaves one unit per remaining rank.
    const int64_t lo_j = std::max(prev + 1, suffix_start[k - r]);
    const int64_t r_max = find_end(p, P[prev], best, prev, n);
    const int64_t hi_j = std::min(r_max, n - (k - r));
    if (lo_j > hi_j) {
      throw std::logic_error(detail::error_message(
          "partition_costs", "internal error: empty cut interval"));
    }
    const double target =
        total * static_cast<double>(r) / static_cast<double>(k);
    // The first j with P[j] >= target against the lowest index holding the
    // value just below the target; the lower index wins a tie.
    const int64_t j1 = lower_bound_index(p, target, lo_j, hi_j);
    int64_t j = j1;
    if (j1 > lo_j) {
      const double below = P[j1 - 1];
      const int64_t j0 = lower_bound_index(p, below, lo_j, j1 - 1);
      if (j1 > hi_j || target - below <= P[j1] - target) {
        j = j0;
      }
    }
    cuts[r] = j;
    prev = j;
  }
  return cuts;
}

std::vector<int64_t> greedy_cuts(const std::vector<double>& P, int64_t k) {
  const int64_t n = static_cast<int64_t>(P.size()) - 1;
  const double total = P[n];
  std::vector<int64_t> cuts(static_cast<size_t>(k + 1), 0);
  cuts[k] = n;
  for (int64_t r = 1; r < k; ++r) {
    const double target =
        total * static_cast<double>(r) / static_cast<double>(k);
    // bisect_right over the inclusive cumsum P[1..n].
    int64_t j = static_cast<int64_t>(
        std::upper_bound(P.begin() + 1, P.end(), target) - (P.begin() + 1));
    j = std::max(j, cuts[r - 1] + 1);
    j = std::min(j, n - (k - r));
    cuts[r] = j;
  }
  return cuts;
}

std::vector<int64_t> count_cuts(int64_t n, int64_t k) {
  std::vector<int64_t> cuts(static_cast<size_t>(k + 1), 0);
  const int64_t per = n / k;
  for (int64_t r = 0; r < k; ++r) {
    cuts[r] = r * per;
  }
  cuts[k] = n;
  return cuts;
}

std::vector<int64_t> lpt_assignment(
    const std::vector<double>& costs, int64_t k) {
  const int64_t n = static_cast<int64_t>(costs.size());
  // Decreasing cost, lower index first on ties; sorting (cost, index)
  // pairs keeps the comparisons on contiguous memory.
  std::vector<std::pair<double, int64_t>> by_cost(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    by_cost[i] = {costs[i], i};
  }
  std::sort(by_cost.begin(), by_cost.end(), [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  // Least-loaded rank, lower rank on ties: a tournament tree over the
  // ranks (leaves in rank order, so the left winner wins ties), updated
  // along one leaf-to-root path per unit with branch-free selects.
  size_t leaves = 1;
  while (leaves < static_cast<size_t>(k)) {
    leaves *= 2;
  }
  std::vector<double> load(leaves, std::numeric_limits<double>::infinity());
  std::fill(load.begin(), load.begin() + k, 0.0);
  std::vector<size_t> tree(2 * leaves);
  for (size_t r = 0; r < leaves; ++r) {
    tree[leaves + r] = r;
  }
  auto pick = [&](size_t node) {
    const size_t a = tree[2 * node];
    const size_t b = tree[2 * node + 1];
    tree[node] = load[b] < load[a] ? b : a;
  };
  for (size_t node = leaves - 1; node >= 1; --node) {
    pick(node);
  }
  std::vector<int64_t> assignment(static_cast<size_t>(n), 0);
  size_t next = 0;
  for (; next < by_cost.size() && by_cost[next].first > 0.0; ++next) {
    const size_t r = tree[1];
    assignment[by_cost[next].second] = static_cast<int64_t>(r);
    load[r] += by_cost[next].first;
    for (size_t node = (leaves + r) / 2; node >= 1; node /= 2) {
      pick(node);
    }
  }
  // Zero-cost units come last and change no load: by the rule above they
  // would all land on one rank. Ranks still at load 0 (exactly the empty
  // ones) take them round-robin instead, so every rank is non-empty when
  // n >= k; with no empty rank they go to the least-loaded one.
  std::vector<int64_t> empty;
  for (int64_t r = 0; r < k; ++r) {
    if (load[r] == 0.0) {
      empty.push_back(r);
    }
  }
  for (size_t j = 0; next < by_cost.size(); ++next, ++j) {
    assignment[by_cost[next].second] =
        empty.empty() ? static_cast<int64_t>(tree[1]) : empty[j % empty.size()];
  }
  return assignment;
}

}  // namespace

std::string to_string(Partitioner p) {
  return traits(p).name;
}

Partitioner parse_partitioner(const std::string& name, const char* field) {
  for (Partitioner p : all_partitioners()) {
    if (to_string(p) == name) {
      return p;
    }
  }
  std::string names;
  for (Partitioner p : all_partitioners()) {
    names += (names.empty() ? "" : ", ") + to_string(p);
  }
  detail::fail(
      "parse_partitioner",
      field,
      ": expected one of ",
      names,
      ", got \"",
      name,
      "\"");
}

std::vector<Partitioner> all_partitioners() {
  return {
      Partitioner::kOptimal,
      Partitioner::kGreedy,
      Partitioner::kCount,
      Partitioner::kLpt};
}

double Partition::max_cost() const {
  double m = 0.0;
  for (double c : rank_costs) {
    m = std::max(m, c);
  }
  return m;
}

double Partition::mean_cost() const {
  double total = 0.0;
  for (double c : rank_costs) {
    total += c;
  }
  return world > 0 ? total / static_cast<double>(world) : 0.0;
}

double Partition::imbalance() const {
  const double mean = mean_cost();
  return mean > 0.0 ? max_cost() / mean : 1.0;
}

Partition partition_costs(
    const std::vector<double>& costs, int64_t world, Partitioner method) {
  const char* fn = "partition_costs";
  check_world(world, fn);
  const std::vector<double> P = checked_prefix_sums(costs, fn);
  const int64_t n = static_cast<int64_t>(costs.size());
  const int64_t k = world;

  if (!traits(method).contiguous) {
    Partition p;
    p.method = method;
    p.world = world;
    if (n < k) {
      p.assignment.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        p.assignment[i] = i;  // same rule as the contiguous partitioners
      }
    } else {
      p.assignment = lpt_assignment(costs, k);
    }
    p.rank_costs.assign(static_cast<size_t>(k), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      p.rank_costs[p.assignment[i]] += costs[i];
    }
    return p;
  }
  if (n < k) {
    // Unit i on rank i; ranks n..k-1 stay empty (dummy frames in the plan).
    std::vector<int64_t> cuts(static_cast<size_t>(k + 1));
    for (int64_t r = 0; r <= k; ++r) {
      cuts[r] = std::min(r, n);
    }
    return finish_contiguous(method, world, P, std::move(cuts));
  }
  switch (method) {
    case Partitioner::kOptimal:
      return finish_contiguous(method, world, P, optimal_cuts(P, k));
    case Partitioner::kGreedy:
      return finish_contiguous(method, world, P, greedy_cuts(P, k));
    case Partitioner::kCount:
    case Partitioner::kLpt:
      break;
  }
  return finish_contiguous(method, world, P, count_cuts(n, k));
}

double optimal_bottleneck(const std::vector<double>& costs, int64_t world) {
  const char* fn = "optimal_bottleneck";
  check_world(world, fn);
  return bottleneck_from_prefix(checked_prefix_sums(costs, fn), world);
}

}  // namespace frameshard
