// File: tests/testing/parity_ranks.h
//
// The parity harness (src/parity/parity.h) with ranks as threads
// (run_ranks.h): prepares the problem and one tower per rank on this thread,
// runs parity::run_rank on every rank, returns rank 0's report and every
// rank's own part.
//
// Usage:
//   parity::ParitySpec spec;            // grid, plan (world), dtype, ...
//   testing::ParityRun run = testing::run_parity(spec, factory);
//   EXPECT_LE(run.report.max_gradient_diff(), 1e-12);
//   EXPECT_GT(*run.report.slice_only_diff, 1e-2);  // the check can fail
//   // per rank: run.ranks[r].encode.plan, .local_grads, .figures
//
//   // Count a rank's collectives: wrap its encode group.
//   auto customize = [&](int rank, const ProcessGroupPtr& pg,
//                        parity::RankOptions& o) {
//     auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
//     o.encode_group = counting;
//     o.after_encode = [&, rank, counting] { n[rank] = counting->alltoalls; };
//   };
//
// Collective inside: every rank of the run calls run_rank.
#pragma once

#include "parity/parity.h"
#include "testing/run_ranks.h"

#include <functional>
#include <vector>

namespace frameshard {
namespace testing {

struct ParityRun {
  parity::ParityReport report;            // rank 0's
  std::vector<parity::RankParity> ranks;  // every rank's own part
};

/// Called on each rank's thread before run_rank: may set its RankOptions
/// (encode group, loss scale, hooks).
using RankCustomizer = std::function<void(
    int rank, const ProcessGroupPtr& group, parity::RankOptions& options)>;

/// spec.plan.world ranks as threads (see the banner); a rank failure is
/// rethrown here (run_ranks).
ParityRun run_parity(
    const parity::ParitySpec& spec,
    const parity::TowerFactory& factory,
    const RankCustomizer& customize = nullptr,
    const RunRanksOptions& options = {});

}  // namespace testing
}  // namespace frameshard
