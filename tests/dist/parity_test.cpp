// The parity harness itself (src/parity/parity.h): identical tower
// instances and rank-specific weights, rank losses on each rank's own rows,
// a gradient check that fails when one rank's gradient is off, the
// slice-only control and when it runs, the float64 exact run, per-rank
// figures, and its errors. Its use on real towers is in encode_test,
// toy_tower_test and `frameshard verify`.

#include "parity/parity.h"
#include "testing/parity_ranks.h"
#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "testing/test_tower.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace frameshard {
namespace {

using testing::kTestFeatures;
using testing::kTestHidden1;
using testing::kTestHidden2;
using testing::kTestHidden3;
using testing::max_abs_diff;
using testing::patch_rows;
using testing::test_tower_factory;

const std::vector<GridThw> kGrid = {{1, 4, 4}, {3, 2, 4}, {1, 2, 2}, {1, 4, 2}};

parity::ParitySpec small_spec(int world) {
  parity::ParitySpec spec;
  spec.grid = kGrid;
  spec.plan = testing::always_shard(world);
  spec.in_features = kTestFeatures;
  spec.seed = 5;
  return spec;
}

TEST(ParityHarness, PrepareBuildsIdenticalTowersAndRankSpecificWeights) {
  const auto setup =
      parity::prepare(small_spec(3), test_tower_factory(3), {0, 1, 2});
  const parity::ParityProblem& p = setup.problem;
  EXPECT_EQ(
      p.widths,
      (std::vector<int64_t>{kTestHidden1, kTestHidden2, kTestHidden3}));
  EXPECT_EQ(p.tokens(), patch_rows(kGrid) / 4);
  EXPECT_EQ(
      p.pixel_values.sizes(),
      (std::vector<int64_t>{p.tokens() * 4, kTestFeatures}));
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_TRUE(at::equal(
          setup.towers[r].parameters[i], setup.reference.parameters[i]))
          << "rank " << r << " parameter " << i;
    }
  }
  // Rank q weighs the rows i % 3 == q: tokens 13 -> 5, 4, 4 rows.
  ASSERT_EQ(p.tokens(), 13);
  for (int q = 0; q < 3; ++q) {
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(p.weights[q][k].size(0), q == 0 ? 5 : 4);
      EXPECT_EQ(p.weights[q][k].size(1), p.widths[k]);
    }
  }
  EXPECT_GT(
      max_abs_diff(p.weights[1][0], p.weights[2][0]), 0.1);  // rank-specific
  EXPECT_FALSE(setup.exact.forward) << "float64 needs no exact twin";

  // A process running one rank builds only its tower (and rank 0 the
  // reference ones), with the same problem.
  const auto one = parity::prepare(small_spec(3), test_tower_factory(3), {2});
  EXPECT_TRUE(at::equal(one.problem.pixel_values, p.pixel_values));
  EXPECT_TRUE(at::equal(one.problem.weights[2][1], p.weights[2][1]));
  EXPECT_FALSE(one.towers[0].forward);
  EXPECT_FALSE(one.reference.forward);
}

TEST(ParityHarness, RankLossUsesOnlyThatRanksRowsWithItsWeights) {
  const auto setup = parity::prepare(small_spec(3), test_tower_factory(3), {0});
  const parity::ParityProblem& p = setup.problem;
  // Row i of every output holds i + 1: rank q's loss is
  // sum over its rows j (i = q + 3 j) of (i + 1) * sum_c weights[q][k][j][c].
  std::vector<at::Tensor> outs;
  for (int64_t w : p.widths) {
    outs.push_back(at::arange(1, p.tokens() + 1, at::kDouble)
                       .reshape({-1, 1})
                       .expand({-1, w}));
  }
  for (int q = 0; q < 3; ++q) {
    double want = 0.0;
    for (size_t k = 0; k < outs.size(); ++k) {
      const at::Tensor row_sums = p.weights[q][k].sum(1);
      for (int64_t j = 0; j < row_sums.size(0); ++j) {
        want += double(q + 3 * j + 1) * row_sums[j].item<double>();
      }
    }
    EXPECT_NEAR(parity::rank_loss(p, outs, q).item<double>(), want, 1e-12)
        << "rank " << q;
  }
  // A row mask multiplies the rows first: all zero gives zero.
  const at::Tensor none = at::zeros({p.tokens(), 1}, at::kDouble);
  EXPECT_EQ(parity::rank_loss(p, outs, 1, none).item<double>(), 0.0);
}

TEST(ParityHarness, MatchingRanksPassAndTheSliceOnlyControlDiffers) {
  const auto run = testing::run_parity(small_spec(3), test_tower_factory(3));
  const parity::ParityReport& rep = run.report;
  ASSERT_TRUE(rep.plan.sharded());
  ASSERT_EQ(rep.outputs.size(), 3u);
  EXPECT_EQ(rep.outputs[0].name, "output0");
  ASSERT_EQ(rep.gradients.size(), 5u);
  EXPECT_EQ(rep.gradients[4].name, "w3");
  EXPECT_LE(rep.max_output_diff(), 1e-12);
  EXPECT_LE(rep.max_gradient_diff(), 1e-12);
  EXPECT_GT(rep.gradient_scale(), 0.1);
  ASSERT_TRUE(rep.slice_only_diff.has_value());
  EXPECT_GT(*rep.slice_only_diff, 1e-2);
}

// The gradient check can fail: one rank's loss off by 0.1% shows up in the
// summed gradients (the outputs still agree).
TEST(ParityHarness, AScaledLossOnOneRankFailsTheGradientCheck) {
  const auto run = testing::run_parity(
      small_spec(3),
      test_tower_factory(3),
      [](int rank, const ProcessGroupPtr&, parity::RankOptions& o) {
        o.loss_scale = rank == 2 ? 1.0 + 1e-3 : 1.0;
      });
  EXPECT_LE(run.report.max_output_diff(), 1e-12);
  EXPECT_GT(run.report.max_gradient_diff(), 1e-6);
}

TEST(ParityHarness, SliceOnlyControlRunsOnlyWhenShardedOverRanks) {
  EXPECT_FALSE(testing::run_parity(small_spec(1), test_tower_factory(3))
                   .report.slice_only_diff.has_value());
  parity::ParitySpec replicated = small_spec(2);
  replicated.plan.policy.enabled = false;
  EXPECT_FALSE(testing::run_parity(replicated, test_tower_factory(3))
                   .report.slice_only_diff.has_value());
  parity::ParitySpec off = small_spec(2);
  off.slice_only_control = false;
  EXPECT_FALSE(testing::run_parity(off, test_tower_factory(3))
                   .report.slice_only_diff.has_value());
}

TEST(ParityHarness, ExactRunStartsFromTheRoundedParameters) {
  parity::ParitySpec spec = small_spec(2);
  spec.dtype = at::kBFloat16;
  spec.exact_reference = true;
  const auto setup = parity::prepare(spec, test_tower_factory(3), {0, 1});
  ASSERT_TRUE(setup.exact.forward);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(setup.exact.parameters[i].scalar_type(), at::kDouble);
    EXPECT_TRUE(at::equal(
        setup.exact.parameters[i],
        setup.reference.parameters[i].to(at::kDouble)));
  }
  const auto run = testing::run_parity(spec, test_tower_factory(3));
  for (const auto& d : run.report.gradients) {
    EXPECT_GT(d.norm_exact, 0.0) << d.name;
    EXPECT_GT(d.norm_ref_error, 0.0) << d.name << ": bf16 is inexact";
  }
}

// One token over three ranks: ranks 1 and 2 own no row of the sequence, so
// their losses are empty sums (a regression: rows i % 3 == 2 of a 1-row
// output once raised a raw torch arange error in frameshard verify).
TEST(ParityHarness, FewerTokensThanRanksGiveEmptyLossesNotAnError) {
  parity::ParitySpec spec = small_spec(3);
  spec.grid = {{1, 2, 2}};
  const auto run = testing::run_parity(spec, test_tower_factory(3));
  EXPECT_LE(run.report.max_output_diff(), 1e-12);
  EXPECT_LE(run.report.max_gradient_diff(), 1e-12);
}

TEST(ParityHarness, ReportsEveryRanksRowsAndBytes) {
  const auto run = testing::run_parity(small_spec(3), test_tower_factory(3));
  const parity::ParityReport& rep = run.report;
  ASSERT_EQ(rep.ranks.size(), 3u);
  int64_t rows = 0;
  for (int r = 0; r < 3; ++r) {
    rows += rep.ranks[r].tower_rows;
    EXPECT_EQ(rep.ranks[r].tower_rows, run.ranks[r].figures.tower_rows);
    // Each rank sends its rows (6 + 5 + 3 float64 features) to 2 peers.
    EXPECT_EQ(
        rep.ranks[r].bytes_sent,
        rep.plan.gather_counts[r] *
            (kTestHidden1 + kTestHidden2 + kTestHidden3) * 8 * 2);
  }
  EXPECT_EQ(rows, patch_rows(kGrid));
}

TEST(ParityHarness, RejectsBadRanksAndAGroupOfTheWrongSize) {
  const std::string bad = testing::torch_error_of(
      [] { parity::prepare(small_spec(2), test_tower_factory(3), {2}); });
  EXPECT_NE(
      bad.find("frameshard::parity::prepare: expected local ranks in [0, 2), "
               "got 2"),
      std::string::npos)
      << bad;

  const auto setup =
      parity::prepare(small_spec(2), test_tower_factory(3), {0, 1});
  const auto outcomes = testing::run_ranks_collect(
      1,
      [&](int rank, ProcessGroupPtr pg) { parity::run_rank(setup, rank, pg); });
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_NE(
      outcomes[0].error.find("frameshard::parity::run_rank: [rank 0/2] "
                             "expected a group of size 2"),
      std::string::npos)
      << outcomes[0].error;
}

}  // namespace
}  // namespace frameshard
