// The parity harness with ranks as threads (see parity_ranks.h).

#include "testing/parity_ranks.h"

#include <numeric>
#include <stdexcept>

namespace frameshard {
namespace testing {

ParityRun run_parity(
    const parity::ParitySpec& spec,
    const parity::TowerFactory& factory,
    const RankCustomizer& customize,
    const RunRanksOptions& options) {
  const int world = static_cast<int>(spec.plan.world);
  std::vector<int> all(static_cast<size_t>(std::max(world, 0)));
  std::iota(all.begin(), all.end(), 0);
  // On this thread: torch's generator is process-wide.
  const parity::ParitySetup setup = parity::prepare(spec, factory, all);
  ParityRun run;
  run.ranks.resize(all.size());
  run_ranks(
      world,
      [&](int rank, ProcessGroupPtr pg) {
        parity::RankOptions ro;
        if (customize) {
          customize(rank, pg, ro);
        }
        run.ranks[rank] = parity::run_rank(setup, rank, pg, ro);
      },
      options);
  if (!run.ranks[0].report) {
    throw std::runtime_error("run_parity: rank 0 returned no report");
  }
  run.report = *run.ranks[0].report;
  return run;
}

}  // namespace testing
}  // namespace frameshard
