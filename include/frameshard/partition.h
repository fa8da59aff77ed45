// File: frameshard/partition.h
//
// Partitioners over a sequence of unit costs. All are deterministic.
//
//   optimal  contiguous blocks with the exact minimum possible maximum block
//            cost (chains-on-chains partitioning, exact bisection over
//            realizable block sums with a greedy probe). Tie rule: among the
//            optimal partitions, cut r (r = 1..k-1) is chosen left to right
//            as the feasible cut whose prefix cost is closest to total*r/k
//            (the lower index on a tie), where feasible means every block
//            stays <= the optimum, non-empty, and the rest still fits.
//   greedy   NeMo Automodel's prefix-sum target cut: cut r =
//            bisect_right(cumsum, total*r/k), clamped so every rank keeps at
//            least one unit. Kept for comparison.
//   count    Megatron-LM's split by unit count, remainder on the last rank
//            (7 units on 4 ranks give 1,1,1,4).
//   lpt      non-contiguous longest-processing-time: units by decreasing
//            cost (lower index first on ties) go to the least-loaded rank
//            (lower rank first on ties). Each rank keeps its units in the
//            original order; the plan carries the permutation that restores
//            the original order after a gather.
//
// When there are fewer units than ranks (n < k), every partitioner gives
// unit i to rank i and leaves ranks n..k-1 empty (the plan fills them with
// dummy frames). With n >= k every rank gets at least one unit.
//
// Usage:
//   auto p = frameshard::partition_costs({9, 16, 25}, 2,
//                                        frameshard::Partitioner::kOptimal);
//   // p.cuts == {0, 2, 3}, p.rank_costs == {25, 25}
//
// Limit: world (cp_size) is at most kMaxWorld = 65536 ranks; the
// partitioners allocate per rank, so a larger world is refused up front.
//
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

enum class Partitioner { kOptimal, kGreedy, kCount, kLpt };

/// What the rest of the library may assume of a partitioner; adding one is
/// an entry here (and its algorithm in partition_costs).
struct PartitionerTraits {
  const char* name;  // config / CLI spelling, to_string's text
  /// Blocks of consecutive units (Partition::cuts); lpt permutes instead.
  bool contiguous;
  /// Attains the minimum maximum block cost (optimal_bottleneck), so its
  /// max cost is the reference the others and split plans are weighed by.
  bool exact;
  /// make_plan may split frames across ranks on top of its partition.
  bool supports_split;
};

constexpr PartitionerTraits traits(Partitioner p) {
  switch (p) {
    case Partitioner::kOptimal:
      return {"optimal", true, true, true};
    case Partitioner::kGreedy:
      return {"greedy", true, false, false};
    case Partitioner::kCount:
      return {"count", true, false, false};
    case Partitioner::kLpt:
      return {"lpt", false, false, false};
  }
  return {"unknown", false, false, false};
}

std::string to_string(Partitioner p);
/// Most ranks a partition (and a plan, and distributed.cp_size) may have.
constexpr int64_t kMaxWorld = 65536;

/// "optimal" | "greedy" | "count" | "lpt"; throws frameshard::Error naming
/// `field` otherwise.
Partitioner parse_partitioner(
    const std::string& name, const char* field = "partitioner");
std::vector<Partitioner> all_partitioners();

struct Partition {
  Partitioner method = Partitioner::kOptimal;
  int64_t world = 1;
  /// Contiguous partitioners: world + 1 unit boundaries, rank r owns
  /// [cuts[r], cuts[r+1]). Empty for lpt.
  std::vector<int64_t> cuts;
  /// Rank of each unit (all partitioners).
  std::vector<int64_t> assignment;
  /// Sum of unit costs per rank.
  std::vector<double> rank_costs;

  bool contiguous() const {
    return !cuts.empty();
  }
  double max_cost() const;
  double mean_cost() const;  // total / world
  /// max / mean (1.0 is perfect; 0 units gives 1.0).
  double imbalance() const;
};

/// Partitions `costs` (each >= 0 and finite) over `world` (>= 1) ranks.
Partition partition_costs(
    const std::vector<double>& costs,
    int64_t world,
    Partitioner method = Partitioner::kOptimal);

/// The minimum over contiguous partitions into at most `world` blocks of the
/// maximum block cost (the value `optimal` attains).
double optimal_bottleneck(const std::vector<double>& costs, int64_t world);

}  // namespace frameshard
