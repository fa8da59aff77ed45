// agree_values: every rank returns when the ranks' named values match;
// otherwise every rank raises the same error, naming the first differing
// argument and the lowest rank that differs, in one collective when the
// ranks agree and two when they do not; mismatched names or counts raise
// everywhere too, never hang.

#include <frameshard/runtime/agree.h>

#include <frameshard/error.h>

#include "testing/rank_errors.h"
#include "testing/run_ranks.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using namespace testing;

/// Runs agree_values(fn "context_parallel") on `world` ranks with the names
/// and values `args` gives each rank; `collectives[rank]` counts the
/// collectives it issued.
std::vector<RankOutcome> run_agree(
    int world,
    const std::function<
        void(int rank, std::vector<std::string>&, std::vector<int64_t>&)>& args,
    std::vector<int>* collectives = nullptr) {
  if (collectives) {
    collectives->assign(static_cast<size_t>(world), -1);
  }
  return run_ranks_collect(world, [&](int rank, ProcessGroupPtr pg) {
    auto counting = c10::make_intrusive<CountingGroup>(pg);
    std::vector<std::string> names{"seq_len", "cp_size", "split"};
    std::vector<int64_t> values{4096, static_cast<int64_t>(world), 1};
    args(rank, names, values);
    try {
      agree_values(counting, "context_parallel", names, values);
    } catch (...) {
      if (collectives) {
        (*collectives)[static_cast<size_t>(rank)] = counting->total();
      }
      throw;
    }
    if (collectives) {
      (*collectives)[static_cast<size_t>(rank)] = counting->total();
    }
  });
}

TEST(AgreeValues, RanksWithEqualValuesReturnAfterOneAllGather) {
  std::vector<int> collectives;
  const auto outcomes = run_agree(
      3,
      [](int, std::vector<std::string>&, std::vector<int64_t>&) {},
      &collectives);
  for (const RankOutcome& o : outcomes) {
    EXPECT_TRUE(o.ok) << o.error;
  }
  EXPECT_EQ(collectives, (std::vector<int>{1, 1, 1}));
}

TEST(AgreeValues, DifferentValuesRaiseTheFirstDifferingNameEverywhere) {
  std::vector<int> collectives;
  const auto outcomes = run_agree(
      3,
      [](int rank, std::vector<std::string>&, std::vector<int64_t>& v) {
        if (rank == 2) {
          v[1] = 4;  // cp_size differs on rank 2 only
          v[2] = 0;
        }
        if (rank == 1) {
          v[2] = 0;  // split differs on rank 1 (a later name)
        }
      },
      &collectives);
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on cp_size: rank 0 has 3, rank 2 has 4",
      "context_parallel");
  EXPECT_EQ(collectives, (std::vector<int>{2, 2, 2}));
}

TEST(AgreeValues, TheLowestDifferingRankIsNamed) {
  const auto outcomes = run_agree(
      3, [](int rank, std::vector<std::string>&, std::vector<int64_t>& v) {
        v[0] += rank;
      });
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on seq_len: rank 0 has 4096, rank 1 has 4097",
      "context_parallel");
}

TEST(AgreeValues, ARankWithMoreValuesThanNamesRaisesEverywhere) {
  const auto outcomes = run_agree(
      2, [](int rank, std::vector<std::string>&, std::vector<int64_t>& v) {
        if (rank == 1) {
          v.push_back(7);
        }
      });
  expect_same_error_everywhere(
      outcomes,
      "rank 1 failed with 3 names and 4 values (expected one value per "
      "name)",
      "context_parallel");
}

TEST(AgreeValues, RanksPassingDifferentNamesRaiseEverywhere) {
  const auto outcomes = run_agree(
      2, [](int rank, std::vector<std::string>& n, std::vector<int64_t>&) {
        if (rank == 1) {
          n[2] = "sequence_split";
        }
      });
  expect_same_error_everywhere(
      outcomes,
      "ranks pass different argument names: rank 0 passes 3 names, rank 1 "
      "passes 3 different ones",
      "context_parallel");
}

TEST(AgreeValues, OneRankChecksOnlyItsOwnArguments) {
  EXPECT_NO_THROW(agree_values(nullptr, "f", {"a"}, {1}));
  EXPECT_THROW(agree_values(nullptr, "f", {"a"}, {1, 2}), Error);
}

}  // namespace
}  // namespace frameshard
