// encode's consensus over differing grids: when ranks' grid_thw differ,
// every rank joins one more all-gather of bounded size and raises the same
// error naming the first differing row (or the row counts, or that the
// grids differ past the rows exchanged); equal grids cost nothing extra.

#include "runtime/consensus.h"

#include "testing/rank_errors.h"
#include "testing/run_ranks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace frameshard {
namespace {

using namespace testing;

TEST(GridDifference, NamesTheFirstDifferingRowOrTheRowCounts) {
  const std::vector<GridThw> a{{1, 32, 32}, {2, 16, 16}, {1, 8, 8}};
  std::vector<GridThw> b = a;
  EXPECT_EQ(internal::grid_difference(0, a, 1, b), "");
  b[1] = {2, 16, 14};
  b.pop_back();
  EXPECT_EQ(
      internal::grid_difference(0, a, 1, b),
      "grid_thw row 1: rank 0 has (2, 16, 16), rank 1 has (2, 16, 14)");
  EXPECT_EQ(
      internal::grid_difference(0, a, 3, {a[0]}),
      "grid_thw rows: rank 0 has 3, rank 3 has 1");
}

/// Runs the consensus alone (no plan, no tower) with each rank's grid.
std::vector<RankOutcome> run_grid_consensus(
    const std::vector<std::vector<GridThw>>& grids,
    std::vector<int>* collectives) {
  const auto world = static_cast<int>(grids.size());
  collectives->assign(grids.size(), -1);
  return run_ranks_collect(world, [&](int rank, ProcessGroupPtr pg) {
    auto counting = c10::make_intrusive<CountingGroup>(pg);
    internal::ConsensusRecord mine;
    mine.rows = 0;
    mine.has_grid = true;
    mine.grid = grids[static_cast<size_t>(rank)];
    try {
      internal::run_consensus(
          counting,
          mine,
          std::vector<int64_t>(grids.size(), 0),
          c10::Device(c10::kCPU),
          std::chrono::milliseconds(0),
          "encode");
    } catch (...) {
      (*collectives)[static_cast<size_t>(rank)] = counting->total();
      throw;
    }
    (*collectives)[static_cast<size_t>(rank)] = counting->total();
  });
}

TEST(GridConsensus, DifferentGridsCostOneMoreAllGatherAndNameTheRow) {
  const std::vector<GridThw> grid{
      {1, 32, 32}, {1, 16, 16}, {1, 8, 8}, {1, 32, 32}, {2, 8, 8}};
  std::vector<GridThw> other = grid;
  other[3] = {1, 32, 30};
  std::vector<int> collectives;
  const auto outcomes =
      run_grid_consensus({grid, grid, other, other}, &collectives);
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on the plan: grid_thw row 3: rank 0 has (1, 32, 32), "
      "rank 2 has (1, 32, 30)");
  EXPECT_EQ(collectives, (std::vector<int>{2, 2, 2, 2}));
}

TEST(GridConsensus, EqualGridsCostNoExtraAllGather) {
  const std::vector<GridThw> grid{{1, 32, 32}, {2, 8, 8}};
  std::vector<int> collectives;
  const auto outcomes = run_grid_consensus({grid, grid}, &collectives);
  for (const RankOutcome& o : outcomes) {
    EXPECT_TRUE(o.ok) << o.error;
  }
  EXPECT_EQ(collectives, (std::vector<int>{1, 1}));
}

TEST(GridConsensus, ARowAddedAtTheEndNamesTheRowCounts) {
  const std::vector<GridThw> grid{{1, 32, 32}, {2, 8, 8}};
  std::vector<GridThw> longer = grid;
  longer.push_back({1, 4, 4});
  std::vector<int> collectives;
  const auto outcomes = run_grid_consensus({grid, longer}, &collectives);
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on the plan: grid_thw rows: rank 0 has 2, rank 1 has 3");
}

TEST(GridConsensus, GridsThatDifferOnlyPastTheExchangedRowsSaySo) {
  const auto n = static_cast<size_t>(internal::kConsensusGridRows + 10);
  const std::vector<GridThw> grid(n, GridThw{1, 4, 4});
  std::vector<GridThw> other = grid;
  other[n - 1] = {1, 4, 8};
  std::vector<GridThw> shorter = grid;
  shorter.pop_back();
  std::vector<int> collectives;
  expect_same_error_everywhere(
      run_grid_consensus({grid, other}, &collectives),
      "grid_thw of rank 0 and rank 1 (4106 rows each) differ after their "
      "first 4096 rows");
  expect_same_error_everywhere(
      run_grid_consensus({grid, shorter}, &collectives),
      "grid_thw rows: rank 0 has 4106, rank 1 has 4105");
}

}  // namespace
}  // namespace frameshard
