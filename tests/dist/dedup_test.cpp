// Each distinct frame once (frameshard/dedup.h) through encode: the pixels
// repeat (GRPO groups, a video's repeated frames), encode hashes them
// (frame_keys) and plans over the distinct units. Through the parity
// harness the outputs every rank receives and the parameter gradients
// summed over ranks must equal the replicated run WITHOUT dedup (which
// encodes every use), float64, at CP 2 and 3, with the all-gather, owner
// routing, lpt and split frames; and the ranks' towers together see each
// distinct frame's rows exactly once.
#include <frameshard/dedup.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/frame_keys.h>

#include "parity/parity.h"
#include "runtime/frame_key_sums.h"
#include "testing/mesh_problem.h"
#include "testing/parity_ranks.h"
#include "testing/run_ranks.h"
#include "testing/test_tower.h"
#include "testing/token_owners.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using testing::always_shard;
using testing::kTestFeatures;
using testing::spread_token_owners;
using testing::test_tower_factory;

using Grid = std::vector<GridThw>;
using Ints = std::vector<int64_t>;

// A GRPO-shaped batch: two prompts' images (8x8 and 4x8), the first repeated
// 4 times and the second 3 times, interleaved, and a 2-frame video.
const Grid kGroupGrid = {
    {1, 8, 8},
    {1, 4, 8},
    {1, 8, 8},
    {2, 4, 4},
    {1, 4, 8},
    {1, 8, 8},
    {1, 4, 8},
    {1, 8, 8}};
const Ints kGroupSameAs = {0, 1, 0, 3, 4, 1, 0, 1, 0};

struct DedupCase {
  Grid grid = kGroupGrid;
  Ints same_as = kGroupSameAs;
  int world = 2;
  bool dedup = true;
  bool owners = false;
  PlanOptions plan = always_shard(2);
  bool frame_context = false;  // the split frames' tower (mesh_problem.h)
};

// test_tower_factory with the tower whose rows see their whole frame.
parity::TowerFactory frame_context_factory() {
  return [](at::ScalarType dtype) {
    const testing::TestTowerParams p =
        testing::leaf_copy(testing::random_test_tower_params(dtype), true);
    parity::TowerInstance t;
    t.forward = [p](const TowerInput& in) {
      return testing::frame_context_tower(p, in, 3);
    };
    t.names = {"w1", "b1", "pos", "w2", "w3"};
    t.parameters = p.list();
    return t;
  };
}

struct DedupRun {
  testing::ParityRun parity;
  int64_t tower_rows = 0;  // over every rank
};

DedupRun run_dedup(const DedupCase& c) {
  parity::ParitySpec spec;
  spec.grid = c.grid;
  spec.plan = c.plan;
  spec.plan.world = c.world;
  spec.plan.min_local_patch_rows = 0;
  spec.in_features = kTestFeatures;
  spec.seed = 11;
  spec.same_as = c.same_as;
  spec.dedup = c.dedup;
  if (c.owners) {
    const FrameSet frames = expand_frames(c.grid, spec.plan.layout);
    spec.token_owner = spread_token_owners(
        frames.total_tokens, c.world, SequenceSplit::kLoadBalanced);
    spec.route_to_owner = true;
  }
  DedupRun run;
  run.parity = testing::run_parity(
      spec, c.frame_context ? frame_context_factory() : test_tower_factory(3));
  for (const auto& r : run.parity.ranks) {
    run.tower_rows += r.figures.tower_rows;
  }
  return run;
}

void expect_parity(const DedupRun& run) {
  EXPECT_LE(run.parity.report.max_output_diff(), 1e-12);
  EXPECT_LE(run.parity.report.max_gradient_diff(), 1e-12)
      << "worst " << run.parity.report.worst_gradient().name;
  ASSERT_TRUE(run.parity.report.slice_only_diff.has_value());
  EXPECT_GT(*run.parity.report.slice_only_diff, 1e-3);
}

// Rows of the distinct units of `c`.
int64_t distinct_rows(const DedupCase& c) {
  const FrameSet fs = expand_frames(c.grid);
  int64_t rows = 0;
  for (size_t i = 0; i < c.same_as.size(); ++i) {
    if (c.same_as[i] == static_cast<int64_t>(i)) {
      rows += fs.units[i].patch_rows;
    }
  }
  return rows;
}

TEST(Dedup, RepeatedImagesMatchTheRunWithoutDedupAtCp2And3) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("cp " + std::to_string(world));
    DedupCase c;
    c.world = world;
    const DedupRun run = run_dedup(c);
    expect_parity(run);
    EXPECT_EQ(run.parity.ranks[0].encode.dedup.distinct_units, 4);
    // The towers together see each distinct frame once (no floor frames;
    // every rank holds a real unit, so no dummy).
    EXPECT_EQ(run.tower_rows, distinct_rows(c));
  }
}

TEST(Dedup, OwnerRoutingSendsEachRowToEveryOwnerOfItsUses) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("cp " + std::to_string(world));
    DedupCase c;
    c.world = world;
    c.owners = true;
    const DedupRun run = run_dedup(c);
    expect_parity(run);
    EXPECT_EQ(run.tower_rows, distinct_rows(c));
  }
}

TEST(Dedup, LptAndSplitFramesKeepParity) {
  DedupCase lpt;
  lpt.plan.partitioner = Partitioner::kLpt;
  expect_parity(run_dedup(lpt));
  // One large page repeated: the distinct plan cuts it across the ranks.
  DedupCase split;
  split.grid = {{1, 16, 16}, {1, 4, 4}, {1, 16, 16}, {1, 16, 16}};
  split.same_as = {0, 1, 0, 0};
  split.plan.split.enabled = true;
  split.plan.split.min_gain = 0.0;
  split.world = 3;
  split.frame_context = true;
  const DedupRun run = run_dedup(split);
  expect_parity(run);
  EXPECT_TRUE(run.parity.ranks[0].encode.plan.split);
  EXPECT_EQ(run.tower_rows, distinct_rows(split));
}

TEST(Dedup, AllUnitsEqualLeaveOneRankADummy) {
  DedupCase c;
  c.grid = Grid(5, GridThw{1, 8, 8});
  c.same_as = {0, 0, 0, 0, 0};
  const DedupRun run = run_dedup(c);
  expect_parity(run);
  // One distinct frame: rank 0 encodes it, rank 1 a dummy (merge^2 rows).
  EXPECT_EQ(run.tower_rows, 64 + 4);
}

TEST(Dedup, NoRepeatsGiveThePlanAndOutputsOfDedupOff) {
  DedupCase on;
  on.same_as = {};  // every unit drawn afresh
  on.world = 3;
  DedupCase off = on;
  off.dedup = false;
  const DedupRun a = run_dedup(on);
  const DedupRun b = run_dedup(off);
  EXPECT_EQ(a.parity.report.plan.fingerprint, b.parity.report.plan.fingerprint);
  for (int r = 0; r < 3; ++r) {
    const auto& x = a.parity.ranks[r].encode.outputs;
    const auto& y = b.parity.ranks[r].encode.outputs;
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_TRUE(at::equal(x[i], y[i])) << "rank " << r << " output " << i;
    }
  }
  EXPECT_EQ(a.tower_rows, b.tower_rows);
}

TEST(Dedup, RanksWithDifferentKeysRaiseTheSameErrorOnEveryRank) {
  const auto params = testing::random_test_tower_params(at::kDouble);
  const FrameSet frames = expand_frames(kGroupGrid, MediaLayout{});
  at::Tensor pixels =
      at::randn({frames.total_patch_rows, kTestFeatures}, at::kDouble);
  pixels.narrow(0, 96, 64).copy_(pixels.narrow(0, 0, 64));  // unit 2 = 0
  const auto outcomes =
      testing::run_ranks_collect(2, [&](int rank, ProcessGroupPtr pg) {
        EncodeOptions o;
        o.plan = always_shard(2);
        o.unit_keys = frame_keys(pixels, grid_to_tensor(kGroupGrid));
        if (rank == 1) {
          o.unit_keys[2].lo ^= 1;  // rank 1 sees unit 2 as new
        }
        encode(
            [&](const TowerInput& in) {
              return testing::test_tower(params, in, 1);
            },
            pixels,
            grid_to_tensor(kGroupGrid),
            pg,
            o);
      });
  for (const auto& out : outcomes) {
    ASSERT_FALSE(out.ok);
    EXPECT_NE(
        out.error.find("ranks disagree on the plan fingerprint"),
        std::string::npos)
        << out.error;
    EXPECT_NE(out.error.find("dedup keys"), std::string::npos) << out.error;
  }
}

TEST(FrameKeys, EqualRowsGiveEqualKeysAndAnyChangedElementANewOne) {
  const Grid grid = {{1, 4, 4}, {1, 4, 4}, {2, 4, 4}, {1, 4, 8}};
  at::Tensor px = at::randn({16 * 4 + 32, kTestFeatures}, at::kFloat);
  px.narrow(0, 16, 16).copy_(px.narrow(0, 0, 16));
  px.narrow(0, 48, 16).copy_(px.narrow(0, 0, 16));  // video frame 1
  const auto keys = frame_keys(px, grid_to_tensor(grid));
  ASSERT_EQ(keys.size(), 5u);
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(keys[0], keys[3]);
  EXPECT_NE(keys[0], keys[2]);
  // One element, one bit: a new key; the same rows in bf16: new keys.
  at::Tensor changed = px.clone();
  changed[20][3].fill_(std::nextafter(changed[20][3].item<float>(), 1e9f));
  EXPECT_NE(frame_keys(changed, grid_to_tensor(grid))[1], keys[1]);
  EXPECT_EQ(frame_keys(changed, grid_to_tensor(grid))[0], keys[0]);
  // Swapped rows inside a unit: a new key (the row index is mixed in).
  at::Tensor swapped = px.clone();
  swapped.narrow(0, 0, 1).copy_(px.narrow(0, 1, 1));
  swapped.narrow(0, 1, 1).copy_(px.narrow(0, 0, 1));
  EXPECT_NE(frame_keys(swapped, grid_to_tensor(grid))[0], keys[0]);
  EXPECT_NE(frame_keys(px.to(at::kBFloat16), grid_to_tensor(grid))[0], keys[0]);
}

// The CPU hashes in one pass over the bytes (per instruction set); CUDA
// runs the tensor ops. Both must give the same bits, or a mesh whose ranks
// hash on different devices would miss its repeats.
TEST(FrameKeys, OnePassOnTheCpuGivesTheBitsOfTheTensorOps) {
  const Grid grid = {{1, 4, 4}, {3, 2, 6}, {1, 8, 2}};
  const FrameSet fs = expand_frames(grid);
  const at::Tensor base = at::randn({16 + 36 + 16, 13}, at::kDouble) * 1000;
  for (const at::Tensor& px :
       {base.to(at::kFloat),
        base.to(at::kBFloat16),
        base.to(at::kHalf),
        base,
        base.to(at::kLong),
        base.abs().remainder(256).to(at::kByte),
        base.to(at::kChar),
        base.to(at::kFloat).t().contiguous().t()}) {  // not contiguous
    SCOPED_TRACE(std::string(c10::toString(px.scalar_type())));
    const auto cpu = internal::unit_lane_sums_cpu(px, fs);
    const auto ops = internal::unit_lane_sums_tensor(px, fs);
    ASSERT_EQ(cpu.size(), fs.units.size());
    EXPECT_EQ(cpu, ops);
  }
}

}  // namespace
}  // namespace frameshard
