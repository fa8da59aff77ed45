// frameshard::encode, multi-rank errors: every failure or disagreement
// (different grids or options, a throwing tower, wrong row counts, dtypes,
// output counts, grad modes, a peer that exits or never arrives, a cp_size
// mismatch, a trainable tower over a group wider than CP) raises the same
// error on every rank instead of hanging; what is allowed (a rank without
// gradient, a frozen tower over a wider group) works.

#include <frameshard/runtime/encode.h>

#include "testing/rank_errors.h"
#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "testing/test_tower.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace frameshard {
namespace {

using testing::always_shard;
using testing::expect_same_error_everywhere;
using testing::kMixedGrid;
using testing::kTestFeatures;
using testing::leaf_copy;
using testing::max_abs_diff;
using testing::patch_rows;
using testing::random_test_tower_params;
using testing::RankOutcome;
using testing::run_ranks;
using testing::run_ranks_collect;
using testing::RunRanksOptions;
using testing::strip_rank_prefix;
using testing::test_tower;
using testing::TestTowerParams;

// ------------------------------------------------------------ errors

/// Runs encode of kMixedGrid on `world` ranks; `customize` may change the
/// rank's grid, options, pixels or tower before the call.
struct RankCall {
  std::vector<GridThw> grid = kMixedGrid;
  EncodeOptions options;
  std::function<std::vector<at::Tensor>(const TowerInput&)> tower;
  bool skip = false;  // the rank exits without calling encode
};

/// Makes the rank's tower return change(its outputs).
void change_outputs(
    RankCall& call,
    const std::function<std::vector<at::Tensor>(std::vector<at::Tensor>)>&
        change) {
  auto inner = call.tower;
  call.tower = [inner, change](const TowerInput& in) {
    return change(inner(in));
  };
}

std::vector<RankOutcome> run_encode(
    int world,
    const std::function<void(int rank, RankCall&)>& customize,
    const RunRanksOptions& ropts = {}) {
  torch::manual_seed(1);
  const TestTowerParams params = random_test_tower_params(at::kDouble);
  return run_ranks_collect(
      world,
      [&](int rank, ProcessGroupPtr pg) {
        RankCall call;
        call.options.plan = always_shard(world);
        const TestTowerParams mine = leaf_copy(params, true);
        call.tower = [&mine](const TowerInput& in) {
          return test_tower(mine, in, 2);
        };
        customize(rank, call);
        if (call.skip) {
          return;
        }
        at::Tensor pixels =
            at::zeros({patch_rows(call.grid), kTestFeatures}, at::kDouble);
        auto res = encode(
            call.tower, pixels, grid_to_tensor(call.grid), pg, call.options);
        at::Tensor loss = res.outputs[0].sum();
        if (loss.requires_grad()) {
          loss.backward();
        }
      },
      ropts);
}

TEST(EncodeErrors, RanksGivenDifferentGridsAllRaiseNamingTheRow) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 2) {
      call.grid[4] = {1, 4, 6};  // same patch count, different frame shape
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on the plan: grid_thw row 4: rank 0 has (1, 6, 4), "
      "rank 2 has (1, 4, 6)");
}

TEST(EncodeErrors, RanksGivenGridsOfDifferentLengthsNameTheRowCounts) {
  const auto outcomes = run_encode(2, [](int rank, RankCall& call) {
    if (rank == 1) {
      call.grid.pop_back();
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on the plan: grid_thw rows: rank 0 has 6, rank 1 has "
      "5");
}

TEST(EncodeErrors, RanksWithOneGridButDifferentOwnerMapsNameTheFingerprints) {
  const int64_t tokens =
      make_plan(kMixedGrid, always_shard(2)).frames.total_tokens;
  const auto outcomes = run_encode(2, [&](int rank, RankCall& call) {
    call.options.token_owner.assign(static_cast<size_t>(tokens), rank);
  });
  expect_same_error_everywhere(
      outcomes, "ranks disagree on the plan fingerprint: rank 0 has 0x");
  EXPECT_NE(
      outcomes[0].error.find("(different grid_thw, options or dedup keys?)"),
      std::string::npos);
  EXPECT_EQ(outcomes[0].error.find("grid_thw row"), std::string::npos);
}

TEST(EncodeErrors, ARankThatWouldReplicateWhileOthersShardRaises) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 1) {
      call.options.plan.policy.enabled = false;
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "ranks disagree on the plan: rank 0 takes the sharded path, rank 1 the "
      "replicated path");
}

TEST(EncodeErrors, ATowerThatThrowsOnOneRankRaisesEverywhere) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 1) {
      call.tower = [](const TowerInput&) -> std::vector<at::Tensor> {
        throw std::runtime_error("boom on rank 1");
      };
    }
  });
  expect_same_error_everywhere(
      outcomes, "rank 1 failed while running the tower: boom on rank 1");
}

TEST(EncodeErrors, WrongRowCountOnOneRankRaisesEverywhere) {
  const auto outcomes = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 2) {
      change_outputs(call, [](std::vector<at::Tensor> outs) {
        outs[0] = outs[0].narrow(0, 0, outs[0].size(0) - 1);
        return outs;
      });
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "rank 2 failed while checking the tower outputs: "
      "frameshard::encode: [rank 2/3] expected tower output 0 to have");
}

TEST(EncodeErrors, DisagreementOnDtypeOrOutputsRaisesEverywhere) {
  const auto dtype = run_encode(3, [](int rank, RankCall& call) {
    if (rank == 2) {
      change_outputs(call, [](std::vector<at::Tensor> outs) {
        for (auto& o : outs) {
          o = o.to(at::kFloat);
        }
        return outs;
      });
    }
  });
  expect_same_error_everywhere(
      dtype,
      "ranks disagree on the output dtype: rank 0 has Double, rank 2 has "
      "Float");

  const auto count = run_encode(2, [](int rank, RankCall& call) {
    if (rank == 1) {
      change_outputs(call, [](std::vector<at::Tensor> outs) {
        return std::vector<at::Tensor>{outs[0]};
      });
    }
  });
  expect_same_error_everywhere(
      count,
      "ranks disagree on the number of tower outputs: rank 0 has 2, "
      "rank 1 has 1");
}

TEST(EncodeErrors, BadGridOnOneRankRaisesEverywhere) {
  const auto outcomes = run_encode(2, [](int rank, RankCall& call) {
    if (rank == 0) {
      call.grid[0] = {1, 3, 4};  // h not divisible by the merge size
    }
  });
  expect_same_error_everywhere(outcomes, "rank 0 failed while planning: ");
}

TEST(EncodeErrors, GradModeOnSomeRanksOnlyRaises) {
  torch::manual_seed(1);
  const TestTowerParams params = random_test_tower_params(at::kDouble);
  const auto guarded = run_ranks_collect(2, [&](int rank, ProcessGroupPtr pg) {
    const TestTowerParams mine = leaf_copy(params, true);
    EncodeOptions eo;
    eo.plan = always_shard(2);
    auto tower = [&mine](const TowerInput& in) {
      return test_tower(mine, in, 1);
    };
    at::Tensor pixels =
        at::zeros({patch_rows(kMixedGrid), kTestFeatures}, at::kDouble);
    if (rank == 1) {
      at::NoGradGuard no_grad;
      encode(tower, pixels, grid_to_tensor(kMixedGrid), pg, eo);
    } else {
      encode(tower, pixels, grid_to_tensor(kMixedGrid), pg, eo);
    }
  });
  expect_same_error_everywhere(
      guarded,
      "ranks disagree on grad mode: rank 0 has it enabled, rank 1 has it "
      "disabled");
}

// A peer that exits before the call: the others raise within the timeout.
TEST(EncodeErrors, PeerThatExitsMidCallIsAnErrorNotAHang) {
  RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_encode(
      3, [](int rank, RankCall& call) { call.skip = rank == 1; }, ropts);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(outcomes[1].ok);
  for (int r : {0, 2}) {
    ASSERT_FALSE(outcomes[r].ok);
    EXPECT_NE(outcomes[r].error.find("allgather failed"), std::string::npos)
        << outcomes[r].error;
  }
  EXPECT_LT(elapsed, std::chrono::milliseconds(2000 + 4000));
}

// A peer that stays alive but never arrives: the group timeout (Gloo's own)
// and, when shorter, EncodeOptions::timeout bound the others' wait.
TEST(EncodeErrors, PeerThatNeverArrivesTimesOut) {
  for (bool per_call : {false, true}) {
    RunRanksOptions ropts;
    ropts.timeout = std::chrono::milliseconds(per_call ? 5000 : 800);
    const auto outcomes = run_encode(
        3,
        [&](int rank, RankCall& call) {
          if (per_call) {
            call.options.timeout = std::chrono::milliseconds(300);
          }
          if (rank == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2000));
            call.skip = true;
          }
        },
        ropts);
    for (int r : {0, 2}) {
      ASSERT_FALSE(outcomes[r].ok) << "rank " << r;
      EXPECT_NE(outcomes[r].error.find("allgather failed"), std::string::npos)
          << outcomes[r].error;
      // Raised on its own clock, well before the sleeping peer went away.
      EXPECT_LT(outcomes[r].elapsed, std::chrono::milliseconds(1600))
          << "rank " << r << " per_call " << per_call;
    }
  }
}

// A peer that exits after the forward, before backward: the others' backward
// raises instead of waiting forever.
TEST(EncodeErrors, PeerThatExitsBeforeBackwardIsAnErrorNotAHang) {
  RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(2000);
  torch::manual_seed(1);
  const TestTowerParams params = random_test_tower_params(at::kDouble);
  const auto outcomes = run_ranks_collect(
      3,
      [&](int rank, ProcessGroupPtr pg) {
        const TestTowerParams mine = leaf_copy(params, true);
        EncodeOptions eo;
        eo.plan = always_shard(3);
        auto tower = [&mine](const TowerInput& in) {
          return test_tower(mine, in, 1);
        };
        at::Tensor pixels =
            at::zeros({patch_rows(kMixedGrid), kTestFeatures}, at::kDouble);
        auto res = encode(tower, pixels, grid_to_tensor(kMixedGrid), pg, eo);
        if (rank == 2) {
          return;
        }
        res.outputs[0].sum().backward();
      },
      ropts);
  EXPECT_TRUE(outcomes[2].ok) << outcomes[2].error;
  for (int r : {0, 1}) {
    ASSERT_FALSE(outcomes[r].ok);
    EXPECT_NE(outcomes[r].error.find("alltoall_base failed"), std::string::npos)
        << outcomes[r].error;
  }
}

// Megatron-Bridge #4784: a rank whose output needs no gradient while the
// others' do must still take part in the backward reduce-scatter.
TEST(EncodeErrors, RankWithoutGradientStillJoinsBackward) {
  RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(3000);
  const auto outcomes = run_encode(
      3,
      [&](int rank, RankCall& call) {
        if (rank == 2) {
          call.tower = testing::detached_outputs(call.tower);
        }
      },
      ropts);
  testing::expect_ok_everywhere(outcomes);
}

TEST(EncodeErrors, CpSizeMismatchUsesMegatronBridgesMessage) {
  torch::manual_seed(1);
  const TestTowerParams params = random_test_tower_params(at::kDouble);
  auto outcomes = run_ranks_collect(1, [&](int, ProcessGroupPtr pg) {
    EncodeOptions eo;
    eo.plan = always_shard(2);
    encode(
        [&](const TowerInput& in) { return test_tower(params, in, 1); },
        at::zeros({patch_rows(kMixedGrid), kTestFeatures}, at::kDouble),
        grid_to_tensor(kMixedGrid),
        pg,
        eo);
  });
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_EQ(
      outcomes[0].error,
      "frameshard: vision frame sharding cp_size=2 does not match its process "
      "group (size 1)");

  outcomes =
      run_encode(2, [](int, RankCall& call) { call.options.plan.world = 3; });
  for (const auto& o : outcomes) {
    EXPECT_EQ(
        o.error,
        "frameshard: vision frame sharding cp_size=3 does not match its "
        "process group (size 2)");
  }
}

TEST(EncodeErrors, TrainableTowerOverAWiderGroupRaisesBeforeAnyCollective) {
  torch::manual_seed(2);
  const TestTowerParams params = random_test_tower_params(at::kDouble);
  std::vector<int> collectives(2, -1);
  const auto outcomes = run_ranks_collect(2, [&](int rank, ProcessGroupPtr pg) {
    auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
    EncodeOptions eo;
    eo.plan = always_shard(2);
    eo.group_spans_only_cp = false;  // e.g. a CP x TP group
    eo.tower_trainable = true;
    try {
      encode(
          [&](const TowerInput& in) { return test_tower(params, in, 1); },
          at::zeros({patch_rows(kMixedGrid), kTestFeatures}, at::kDouble),
          grid_to_tensor(kMixedGrid),
          counting,
          eo);
    } catch (...) {
      collectives[rank] = counting->total();
      throw;
    }
  });
  expect_same_error_everywhere(
      outcomes,
      "expected a frozen tower (tower_trainable = false) when "
      "sharding over a group wider than CP");
  EXPECT_EQ(collectives, (std::vector<int>{0, 0}));
}

TEST(EncodeErrors, FrozenTowerOverAWiderGroupIsAllowed) {
  torch::manual_seed(3);
  const TestTowerParams params = random_test_tower_params(at::kDouble);
  const at::Tensor pixels =
      at::randn({patch_rows(kMixedGrid), kTestFeatures}, at::kDouble);
  const auto ref =
      test_tower(params, whole_frames_input(pixels, kMixedGrid), 2);
  std::vector<double> diffs(4, 1.0);
  // One byte per rank: std::vector<bool> packs the ranks' flags into shared
  // words, a data race between the rank threads (ThreadSanitizer saw it).
  std::vector<char> sharded(4, 0);
  run_ranks(4, [&](int rank, ProcessGroupPtr pg) {
    const TestTowerParams frozen = leaf_copy(params, false);
    EncodeOptions eo;
    eo.plan = always_shard(4);  // the CP x TP group of size 4
    eo.group_spans_only_cp = false;
    eo.tower_trainable = false;
    auto res = encode(
        [&](const TowerInput& in) { return test_tower(frozen, in, 2); },
        pixels,
        grid_to_tensor(kMixedGrid),
        pg,
        eo);
    sharded[rank] = res.plan.sharded();
    diffs[rank] = std::max(
        max_abs_diff(res.outputs[0], ref[0]),
        max_abs_diff(res.outputs[1], ref[1]));
    EXPECT_FALSE(res.outputs[0].requires_grad());
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(sharded[r]);
    EXPECT_LE(diffs[r], 1e-12);
  }
}

TEST(EncodeWorldOne, ErrorsPropagateAsRaised) {
  const auto outcomes = run_ranks_collect(1, [](int, ProcessGroupPtr pg) {
    EncodeOptions eo;
    eo.plan = always_shard(1);
    try {
      encode(
          [](const TowerInput&) -> std::vector<at::Tensor> {
            throw std::domain_error("tower says no");
          },
          at::zeros({patch_rows(kMixedGrid), kTestFeatures}, at::kDouble),
          grid_to_tensor(kMixedGrid),
          pg,
          eo);
    } catch (const std::domain_error&) {
      return;  // the tower's own exception type
    }
    throw std::runtime_error("expected the tower's exception");
  });
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].error;
}

}  // namespace
}  // namespace frameshard
