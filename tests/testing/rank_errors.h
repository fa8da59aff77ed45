// File: tests/testing/rank_errors.h
//
// The multi-rank error check: every rank raised, its message starts with
// its own "frameshard::<fn>: [rank r/W] " prefix, and the text after the
// prefix is the same on every rank and contains a needle.
//
// Usage:
//   const auto outcomes = testing::run_ranks_collect(3, fn);
//   testing::expect_same_error_everywhere(outcomes, "rank 1 failed");
#pragma once

#include "testing/run_ranks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace frameshard {
namespace testing {

inline void expect_same_error_everywhere(
    const std::vector<RankOutcome>& outcomes,
    const std::string& needle,
    const std::string& fn = "encode") {
  ASSERT_FALSE(outcomes.empty());
  const std::string first = strip_rank_prefix(outcomes[0].error);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r << " did not raise";
    EXPECT_EQ(
        outcomes[r].error.rfind(
            "frameshard::" + fn + ": [rank " + std::to_string(r) + "/" +
                std::to_string(outcomes.size()) + "] ",
            0),
        0u)
        << outcomes[r].error;
    EXPECT_EQ(strip_rank_prefix(outcomes[r].error), first) << "rank " << r;
  }
  EXPECT_NE(first.find(needle), std::string::npos) << first;
}

}  // namespace testing
}  // namespace frameshard
