#include <frameshard/error.h>
#include <frameshard/partition.h>
#include <frameshard/splitmix64.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;

using Cuts = std::vector<int64_t>;

// p * (p + alpha): the cost model's shape on patch counts.
std::vector<double> patch_costs(
    const std::vector<int64_t>& patches, double alpha) {
  std::vector<double> c;
  for (int64_t p : patches) {
    c.push_back(static_cast<double>(p) * (static_cast<double>(p) + alpha));
  }
  return c;
}

std::vector<int64_t> per_rank_counts(const Partition& p) {
  std::vector<int64_t> counts(static_cast<size_t>(p.world), 0);
  for (int64_t r : p.assignment) {
    counts[r] += 1;
  }
  return counts;
}

// Structural invariants every partition must satisfy.
void check_partition(
    const Partition& p,
    const std::vector<double>& costs,
    int64_t world,
    Partitioner method) {
  const int64_t n = static_cast<int64_t>(costs.size());
  ASSERT_EQ(p.method, method);
  ASSERT_EQ(p.world, world);
  ASSERT_EQ(p.assignment.size(), costs.size());
  ASSERT_EQ(p.rank_costs.size(), static_cast<size_t>(world));
  std::vector<double> sums(static_cast<size_t>(world), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(p.assignment[i], 0);
    ASSERT_LT(p.assignment[i], world);
    sums[p.assignment[i]] += costs[i];
  }
  double total = 0.0;
  for (int64_t r = 0; r < world; ++r) {
    EXPECT_NEAR(p.rank_costs[r], sums[r], 1e-9 * (1.0 + sums[r])) << r;
    total += sums[r];
  }
  const std::vector<int64_t> counts = per_rank_counts(p);
  if (n >= world) {
    for (int64_t r = 0; r < world; ++r) {
      EXPECT_GE(counts[r], 1) << to_string(method) << " rank " << r
                              << " empty, n=" << n << " k=" << world;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(p.assignment[i], i);
    }
  }
  if (method == Partitioner::kLpt) {
    EXPECT_TRUE(p.cuts.empty());
    EXPECT_FALSE(p.contiguous());
  } else {
    ASSERT_EQ(p.cuts.size(), static_cast<size_t>(world + 1));
    EXPECT_TRUE(p.contiguous());
    EXPECT_EQ(p.cuts.front(), 0);
    EXPECT_EQ(p.cuts.back(), n);
    for (int64_t r = 0; r < world; ++r) {
      EXPECT_LE(p.cuts[r], p.cuts[r + 1]);
      for (int64_t i = p.cuts[r]; i < p.cuts[r + 1]; ++i) {
        EXPECT_EQ(p.assignment[i], r);
      }
    }
  }
  EXPECT_NEAR(
      p.mean_cost(), total / static_cast<double>(world), 1e-9 * (1 + total));
}

// Minimum over contiguous partitions into at most k blocks of the largest
// block (dynamic programming, O(k n^2)).
double brute_force_bottleneck(const std::vector<double>& costs, int64_t k) {
  const size_t n = costs.size();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + costs[i];
  }
  std::vector<double> f(n + 1, inf);
  f[0] = 0.0;
  for (int64_t j = 1; j <= k; ++j) {
    std::vector<double> g(n + 1, inf);
    for (size_t i = 0; i <= n; ++i) {
      for (size_t m = 0; m <= i; ++m) {
        g[i] = std::min(g[i], std::max(f[m], prefix[i] - prefix[m]));
      }
    }
    f = g;
  }
  return f[n];
}

// The documented tie rule by exhaustive search: among all partitions into k
// non-empty blocks whose maximum is the optimum, fix cut r = 1..k-1 left to
// right to the one closest to total*r/k (lower index on a tie).
Cuts brute_force_tie_rule(const std::vector<double>& costs, int64_t k) {
  const int64_t n = static_cast<int64_t>(costs.size());
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + costs[i];
  }
  const double best = brute_force_bottleneck(costs, k);
  std::vector<Cuts> all;
  Cuts cur{0};
  // Enumerate strictly increasing cuts.
  auto rec = [&](auto&& self, int64_t r) -> void {
    if (r == k) {
      cur.push_back(n);
      bool ok = true;
      for (int64_t b = 0; b < k; ++b) {
        ok = ok && cur[b] < cur[b + 1] &&
             prefix[cur[b + 1]] - prefix[cur[b]] <= best;
      }
      if (ok) {
        all.push_back(cur);
      }
      cur.pop_back();
      return;
    }
    for (int64_t j = cur.back() + 1; j <= n - (k - r); ++j) {
      cur.push_back(j);
      self(self, r + 1);
      cur.pop_back();
    }
  };
  rec(rec, 1);
  const double total = prefix[n];
  for (int64_t r = 1; r < k; ++r) {
    const double target =
        total * static_cast<double>(r) / static_cast<double>(k);
    double best_d = std::numeric_limits<double>::infinity();
    int64_t best_j = -1;
    for (const Cuts& c : all) {
      const double d = std::fabs(prefix[c[r]] - target);
      if (d < best_d || (d == best_d && c[r] < best_j)) {
        best_d = d;
        best_j = c[r];
      }
    }
    std::vector<Cuts> keep;
    for (const Cuts& c : all) {
      if (c[r] == best_j) {
        keep.push_back(c);
      }
    }
    all = keep;
  }
  return all.empty() ? Cuts{} : all.front();
}

// Minimum makespan over every (non-contiguous) assignment: k^n candidates.
double brute_force_makespan(const std::vector<double>& costs, int64_t k) {
  const size_t n = costs.size();
  double best = std::numeric_limits<double>::infinity();
  std::vector<int64_t> a(n, 0);
  while (true) {
    std::vector<double> load(static_cast<size_t>(k), 0.0);
    for (size_t i = 0; i < n; ++i) {
      load[a[i]] += costs[i];
    }
    best = std::min(best, *std::max_element(load.begin(), load.end()));
    size_t i = 0;
    while (i < n && ++a[i] == k) {
      a[i++] = 0;
    }
    if (i == n) {
      return best;
    }
  }
}

TEST(Partitioner, Names) {
  EXPECT_EQ(to_string(Partitioner::kOptimal), "optimal");
  EXPECT_EQ(to_string(Partitioner::kGreedy), "greedy");
  EXPECT_EQ(to_string(Partitioner::kCount), "count");
  EXPECT_EQ(to_string(Partitioner::kLpt), "lpt");
  for (Partitioner p : all_partitioners()) {
    EXPECT_EQ(parse_partitioner(to_string(p)), p);
  }
  EXPECT_EQ(all_partitioners().size(), 4u);
  std::string m = error_of(
      [] { parse_partitioner("Optimal", "frame_sharding.partitioner"); });
  EXPECT_EQ(
      m,
      "frameshard::parse_partitioner: frame_sharding.partitioner: expected one "
      "of "
      "optimal, greedy, count, lpt, got \"Optimal\"");
}

TEST(PartitionCosts, HeaderExample) {
  Partition p = partition_costs({9, 16, 25}, 2, Partitioner::kOptimal);
  EXPECT_EQ(p.cuts, (Cuts{0, 2, 3}));
  EXPECT_EQ(p.rank_costs, (std::vector<double>{25, 25}));
  EXPECT_EQ(p.assignment, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(p.max_cost(), 25);
  EXPECT_EQ(p.mean_cost(), 25);
  EXPECT_EQ(p.imbalance(), 1.0);
}

TEST(PartitionCosts, EqualCostsSplitEvenly) {
  for (Partitioner m :
       {Partitioner::kOptimal, Partitioner::kGreedy, Partitioner::kCount}) {
    EXPECT_EQ(
        partition_costs(std::vector<double>(4, 7.0), 2, m).cuts,
        (Cuts{0, 2, 4}));
    EXPECT_EQ(
        partition_costs(std::vector<double>(6, 7.0), 3, m).cuts,
        (Cuts{0, 2, 4, 6}));
    EXPECT_EQ(
        partition_costs(std::vector<double>(8, 7.0), 4, m).cuts,
        (Cuts{0, 2, 4, 6, 8}));
  }
  // LPT: equal costs go round-robin (lower rank first on ties).
  EXPECT_EQ(
      partition_costs(std::vector<double>(4, 1.0), 2, Partitioner::kLpt)
          .assignment,
      (std::vector<int64_t>{0, 1, 0, 1}));
  // Zero costs still reach every rank.
  EXPECT_EQ(
      partition_costs(std::vector<double>(4, 0.0), 3, Partitioner::kLpt)
          .assignment,
      (std::vector<int64_t>{0, 1, 2, 0}));
}

TEST(PartitionCosts, ExactBoundaries) {
  // Patches [3,4,5] with alpha 0: a cumulative cost landing exactly on the
  // target stays on the lower rank (Automodel's bisect_right fix).
  for (Partitioner m : {Partitioner::kOptimal, Partitioner::kGreedy}) {
    Partition p = partition_costs(patch_costs({3, 4, 5}, 0), 2, m);
    EXPECT_EQ(p.cuts, (Cuts{0, 2, 3})) << to_string(m);
    EXPECT_EQ(p.rank_costs, (std::vector<double>{25, 25}));
    EXPECT_EQ(partition_costs({1, 1, 2}, 2, m).cuts, (Cuts{0, 2, 3}));
    EXPECT_EQ(partition_costs({1, 1, 1, 1}, 2, m).cuts, (Cuts{0, 2, 4}));
  }
}

TEST(PartitionCosts, Hotspot) {
  const auto costs = patch_costs({100, 1, 1, 1, 100, 1, 1, 1}, 0);
  for (Partitioner m : {Partitioner::kOptimal, Partitioner::kGreedy}) {
    Partition p = partition_costs(costs, 2, m);
    EXPECT_EQ(p.cuts, (Cuts{0, 4, 8})) << to_string(m);
    const double spread = std::fabs(p.rank_costs[0] - p.rank_costs[1]);
    EXPECT_LE(spread, *std::max_element(costs.begin(), costs.end()));
  }
}

TEST(PartitionCosts, AutomodelEntriesGreedyVsOptimal) {
  const auto costs = patch_costs({4, 16, 8, 24, 4, 24}, 0);
  Partition g = partition_costs(costs, 2, Partitioner::kGreedy);
  EXPECT_EQ(g.cuts, (Cuts{0, 3, 6}));
  EXPECT_EQ(g.rank_costs, (std::vector<double>{336, 1168}));
  Partition o = partition_costs(costs, 2, Partitioner::kOptimal);
  EXPECT_EQ(o.cuts, (Cuts{0, 4, 6}));
  EXPECT_EQ(o.rank_costs, (std::vector<double>{912, 592}));
  EXPECT_NEAR(g.max_cost() / o.max_cost(), 1.28, 0.005);
  EXPECT_EQ(optimal_bottleneck(costs, 2), 912);
  // Automodel's cuts at world 3 and 4.
  EXPECT_EQ(
      partition_costs(costs, 3, Partitioner::kGreedy).cuts, (Cuts{0, 3, 5, 6}));
  EXPECT_EQ(
      partition_costs(costs, 4, Partitioner::kGreedy).cuts,
      (Cuts{0, 3, 4, 5, 6}));
}

TEST(PartitionCosts, AutomodelMixedSizes) {
  std::vector<int64_t> patches(4, 1024);
  patches.insert(patches.end(), 400, 112);
  // alpha 0: greedy piles the small frames on the last ranks.
  const auto c0 = patch_costs(patches, 0);
  Partition g0 = partition_costs(c0, 8, Partitioner::kGreedy);
  EXPECT_EQ(
      per_rank_counts(g0), (std::vector<int64_t>{1, 1, 1, 33, 92, 92, 92, 92}));
  Partition o0 = partition_costs(c0, 8, Partitioner::kOptimal);
  EXPECT_NEAR(g0.max_cost() / o0.max_cost(), 1.19, 0.01);
  EXPECT_EQ(o0.max_cost(), optimal_bottleneck(c0, 8));
  // alpha 3456 (Automodel's auto): the split flattens and greedy is optimal.
  const auto c1 = patch_costs(patches, 3456);
  Partition g1 = partition_costs(c1, 8, Partitioner::kGreedy);
  EXPECT_EQ(
      per_rank_counts(g1),
      (std::vector<int64_t>{13, 56, 56, 56, 55, 56, 56, 56}));
  EXPECT_EQ(g1.max_cost(), partition_costs(c1, 8).max_cost());
  auto ratio = [](const std::vector<int64_t>& c) {
    return static_cast<double>(*std::max_element(c.begin(), c.end())) /
           static_cast<double>(*std::min_element(c.begin(), c.end()));
  };
  EXPECT_GT(ratio(per_rank_counts(g0)), 10.0);
  EXPECT_LE(ratio(per_rank_counts(g1)) * 10.0, ratio(per_rank_counts(g0)));
}

TEST(PartitionCosts, CountSplitRemainderOnLastRank) {
  EXPECT_EQ(
      per_rank_counts(
          partition_costs(std::vector<double>(7, 1.0), 4, Partitioner::kCount)),
      (std::vector<int64_t>{1, 1, 1, 4}));
  EXPECT_EQ(
      per_rank_counts(
          partition_costs(std::vector<double>(9, 1.0), 4, Partitioner::kCount)),
      (std::vector<int64_t>{2, 2, 2, 3}));
  // Costs are ignored.
  EXPECT_EQ(
      partition_costs({100, 1, 1, 1, 1}, 2, Partitioner::kCount).cuts,
      (Cuts{0, 2, 5}));
}

TEST(PartitionCosts, Lpt) {
  Partition p = partition_costs({5, 4, 3, 3, 3}, 2, Partitioner::kLpt);
  EXPECT_EQ(p.assignment, (std::vector<int64_t>{0, 1, 1, 0, 1}));
  EXPECT_EQ(p.rank_costs, (std::vector<double>{8, 10}));
  // Decreasing cost, lower index first among equal costs.
  p = partition_costs({1, 9, 1, 9, 5}, 3, Partitioner::kLpt);
  EXPECT_EQ(p.assignment, (std::vector<int64_t>{2, 0, 2, 1, 2}));
  // Not contiguous: it can beat the contiguous optimum ...
  const std::vector<double> c{6, 6, 1, 1};
  EXPECT_EQ(partition_costs(c, 2, Partitioner::kLpt).max_cost(), 7);
  EXPECT_EQ(optimal_bottleneck(c, 2), 8);
  // ... and lose to it (the classic LPT counter-example, 7 vs 6).
  const std::vector<double> c2{3, 3, 2, 2, 2};
  EXPECT_EQ(partition_costs(c2, 2, Partitioner::kLpt).max_cost(), 7);
  EXPECT_EQ(optimal_bottleneck(c2, 2), 6);
}

TEST(PartitionCosts, FewerUnitsThanRanks) {
  for (Partitioner m : all_partitioners()) {
    Partition p = partition_costs({3, 5}, 4, m);
    EXPECT_EQ(p.assignment, (std::vector<int64_t>{0, 1})) << to_string(m);
    EXPECT_EQ(p.rank_costs, (std::vector<double>{3, 5, 0, 0}));
    if (m == Partitioner::kLpt) {
      EXPECT_TRUE(p.cuts.empty());
    } else {
      EXPECT_EQ(p.cuts, (Cuts{0, 1, 2, 2, 2}));
    }
  }
  // Automodel's entry-level partition returns None for one video on 4
  // ranks; at frame level 8 equal units split evenly.
  EXPECT_EQ(
      partition_costs(std::vector<double>(8, 1.0), 4).cuts,
      (Cuts{0, 2, 4, 6, 8}));
}

TEST(PartitionCosts, EmptyAndSingleRank) {
  for (Partitioner m : all_partitioners()) {
    Partition p = partition_costs({}, 3, m);
    EXPECT_TRUE(p.assignment.empty());
    EXPECT_EQ(p.rank_costs, (std::vector<double>{0, 0, 0}));
    EXPECT_EQ(p.max_cost(), 0.0);
    EXPECT_EQ(p.mean_cost(), 0.0);
    EXPECT_EQ(p.imbalance(), 1.0);
    if (m != Partitioner::kLpt) {
      EXPECT_EQ(p.cuts, (Cuts{0, 0, 0, 0}));
    }
    p = partition_costs({1, 2, 3}, 1, m);
    EXPECT_EQ(p.assignment, (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(p.rank_costs, (std::vector<double>{6}));
  }
  EXPECT_EQ(optimal_bottleneck({}, 4), 0.0);
  EXPECT_EQ(optimal_bottleneck({2, 7, 1}, 5), 7.0);
}

TEST(PartitionCosts, ZeroCostsFollowTieRule) {
  // Every cut ties at cost 0: the lowest feasible index wins.
  EXPECT_EQ(partition_costs({0, 0, 0, 0}, 2).cuts, (Cuts{0, 1, 4}));
  EXPECT_EQ(partition_costs({0, 0, 5, 0, 0}, 2).cuts, (Cuts{0, 1, 5}));
  Partition p = partition_costs({0, 0, 0, 0}, 2);
  EXPECT_EQ(p.imbalance(), 1.0);
}

TEST(PartitionCosts, ImbalanceAccessors) {
  Partition p = partition_costs({1, 1, 1, 5}, 2, Partitioner::kCount);
  EXPECT_EQ(p.max_cost(), 6);
  EXPECT_EQ(p.mean_cost(), 4);
  EXPECT_EQ(p.imbalance(), 1.5);
}

TEST(PartitionCosts, RejectsBadInput) {
  std::string m = error_of([] { partition_costs({1, 2}, 0); });
  EXPECT_EQ(m, "frameshard::partition_costs: expected world >= 1, got 0");
  m = error_of([] { partition_costs({1, -2, 3}, 2); });
  EXPECT_EQ(
      m,
      "frameshard::partition_costs: expected costs[1] finite and >= 0, got -2");
  m = error_of([] { partition_costs({1, 2, std::nan("")}, 2); });
  EXPECT_NE(
      m.find("expected costs[2] finite and >= 0, got nan"), std::string::npos)
      << m;
  m = error_of([] {
    partition_costs(
        {std::numeric_limits<double>::infinity()}, 2, Partitioner::kLpt);
  });
  EXPECT_NE(m.find("costs[0] finite and >= 0, got inf"), std::string::npos)
      << m;
  m = error_of([] { optimal_bottleneck({1}, -1); });
  EXPECT_EQ(m, "frameshard::optimal_bottleneck: expected world >= 1, got -1");
}

// Small integer costs (many ties and zeros): the optimum equals a brute-force
// DP and the cuts follow the tie rule found by exhaustive search.
TEST(PartitionProperties, OptimalMatchesBruteForceOnSmallInputs) {
  SplitMix64 rng(1);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = rng.uniform(0, 12);
    const int64_t k = rng.uniform(1, 5);
    const int64_t max_cost = rng.uniform(0, 3) == 0 ? 1 : 9;
    std::vector<double> costs;
    for (int64_t i = 0; i < n; ++i) {
      costs.push_back(static_cast<double>(rng.uniform(0, max_cost)));
    }
    Partition p = partition_costs(costs, k);
    check_partition(p, costs, k, Partitioner::kOptimal);
    const double best = brute_force_bottleneck(costs, k);
    ASSERT_EQ(optimal_bottleneck(costs, k), best) << "trial " << trial;
    ASSERT_EQ(p.max_cost(), best) << "trial " << trial;
    if (n >= k) {
      ASSERT_EQ(p.cuts, brute_force_tie_rule(costs, k)) << "trial " << trial;
    }
  }
}

// Realistic p * (p + alpha) costs, wide size ranges and non-integer costs:
// optimal is never worse than greedy or count, and LPT stays within its
// list-scheduling bound.
TEST(PartitionProperties, RandomWorkloads) {
  SplitMix64 rng(2);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = rng.uniform(0, 300);
    const int64_t k = rng.uniform(1, 70);
    std::vector<double> costs;
    const int kind = static_cast<int>(rng.uniform(0, 3));
    const double alpha = static_cast<double>(rng.uniform(0, 2) * 3456);
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case 0: {  // frames of 16..4096 patches
          const double p = static_cast<double>(4 * rng.uniform(4, 1024));
          costs.push_back(p * (p + alpha));
          break;
        }
        case 1: {  // many small frames with rare huge images
          const double p =
              static_cast<double>(rng.uniform(0, 30) == 0 ? 16384 : 64);
          costs.push_back(p * (p + alpha));
          break;
        }
        case 2:  // non-integer costs
          costs.push_back(rng.unit() * 1000.0);
          break;
        default:  // zeros and ties
          costs.push_back(static_cast<double>(rng.uniform(0, 2)));
          break;
      }
    }
    std::vector<Partition> parts;
    for (Partitioner m : all_partitioners()) {
      parts.push_back(partition_costs(costs, k, m));
      check_partition(parts.back(), costs, k, m);
    }
    const Partition& opt = parts[0];
    const double best = optimal_bottleneck(costs, k);
    ASSERT_EQ(opt.max_cost(), best) << "trial " << trial;
    EXPECT_LE(best, parts[1].max_cost())
        << "greedy beat optimal, trial " << trial;
    EXPECT_LE(best, parts[2].max_cost())
        << "count beat optimal, trial " << trial;

    double total = 0.0;
    double largest = 0.0;
    for (double c : costs) {
      total += c;
      largest = std::max(largest, c);
    }
    const double lower = std::max(largest, total / static_cast<double>(k));
    const double tol = 1e-9 * (1.0 + total);
    EXPECT_GE(best, lower - tol);
    // Contiguous list-scheduling bound: the optimum is within one unit of
    // the mean share.
    EXPECT_LE(best, total / static_cast<double>(k) + largest + tol);
    const Partition& lpt = parts[3];
    EXPECT_GE(lpt.max_cost(), lower - tol);
    EXPECT_LE(
        lpt.max_cost(),
        total / static_cast<double>(k) +
            largest * (1.0 - 1.0 / static_cast<double>(k)) + tol)
        << "trial " << trial;

    // Determinism: the same input gives the same partition.
    Partition again = partition_costs(costs, k);
    EXPECT_EQ(again.cuts, opt.cuts);
    EXPECT_EQ(again.rank_costs, opt.rank_costs);
  }
}

// Graham's bound against the true non-contiguous optimum.
TEST(PartitionProperties, LptWithinGrahamBound) {
  SplitMix64 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = rng.uniform(1, 8);
    const int64_t k = rng.uniform(1, 3);
    std::vector<double> costs;
    for (int64_t i = 0; i < n; ++i) {
      costs.push_back(static_cast<double>(rng.uniform(1, 20)));
    }
    const double opt = brute_force_makespan(costs, k);
    const double lpt = partition_costs(costs, k, Partitioner::kLpt).max_cost();
    EXPECT_GE(lpt, opt);
    EXPECT_LE(
        lpt, (4.0 / 3.0 - 1.0 / (3.0 * static_cast<double>(k))) * opt + 1e-9)
        << "trial " << trial;
  }
}

// Large inputs stay exact: integer costs up to ~1e9 over 65k units.
TEST(PartitionProperties, LargeIntegerInputsAgreeWithGreedyBound) {
  SplitMix64 rng(4);
  std::vector<double> costs;
  for (int i = 0; i < 65536; ++i) {
    const double p = static_cast<double>(4 * rng.uniform(16, 4096));
    costs.push_back(p * (p + 6608));
  }
  for (int64_t k : {2, 7, 64, 1000}) {
    Partition opt = partition_costs(costs, k);
    check_partition(opt, costs, k, Partitioner::kOptimal);
    EXPECT_EQ(opt.max_cost(), optimal_bottleneck(costs, k));
    EXPECT_LE(
        opt.max_cost(),
        partition_costs(costs, k, Partitioner::kGreedy).max_cost());
    EXPECT_LE(opt.max_cost(), opt.mean_cost() + 4.0 * 16384 * (16384 + 6608))
        << k;
    if (k <= 64) {
      EXPECT_LT(opt.imbalance(), 1.01) << k;
    }
  }
}

// traits() says what each partitioner does: its name, whether it leaves
// cuts, whether it attains the optimal bottleneck, and that only optimal
// may split frames.
TEST(PartitionerTraits, MatchWhatEachPartitionerDoes) {
  static_assert(traits(Partitioner::kOptimal).exact);
  static_assert(!traits(Partitioner::kLpt).contiguous);
  const std::vector<double> costs{9, 16, 25, 1, 4, 36, 2, 2};
  for (Partitioner p : all_partitioners()) {
    SCOPED_TRACE(to_string(p));
    const PartitionerTraits t = traits(p);
    EXPECT_EQ(parse_partitioner(t.name), p);
    const Partition part = partition_costs(costs, 3, p);
    EXPECT_EQ(part.contiguous(), t.contiguous);
    if (t.exact) {
      EXPECT_EQ(part.max_cost(), optimal_bottleneck(costs, 3));
    }
    EXPECT_EQ(t.supports_split, p == Partitioner::kOptimal);
  }
}

}  // namespace
}  // namespace frameshard
