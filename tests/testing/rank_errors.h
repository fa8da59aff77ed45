// File: tests/testing/rank_errors.h
//
// The multi-rank error check: every rank raised, its message starts with
// its own "frameshard::<fn>: [rank r/W] " prefix, and the text after the
// prefix is the same on every rank and contains a needle; or that every
// rank returned, e.g. with one rank's tower outputs detached (a rank whose
// outputs need no gradient must still join the backward).
//
// Usage:
//   const auto outcomes = testing::run_ranks_collect(3, fn);
//   testing::expect_same_error_everywhere(outcomes, "rank 1 failed");
//   call.tower = testing::detached_outputs(call.tower);
//   testing::expect_ok_everywhere(outcomes);
#pragma once

#include "testing/run_ranks.h"

#include <frameshard/tower.h>

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

inline void expect_ok_everywhere(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].error;
  }
}

/// `tower` with its outputs detached: they need no gradient.
inline VisionTower detached_outputs(VisionTower tower) {
  return [tower = std::move(tower)](const TowerInput& in) {
    std::vector<at::Tensor> outs = tower(in);
    for (auto& o : outs) {
      o = o.detach();
    }
    return outs;
  };
}

}  // namespace testing
}  // namespace frameshard
