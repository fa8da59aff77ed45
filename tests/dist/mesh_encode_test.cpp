// frameshard::encode_mesh, multi-rank (ranks as threads, float64): each
// replica's outputs and the tower's parameter gradients must equal the
// per-replica run -- each replica's frames through the tower in one
// process -- whatever the mesh (DP 2 x CP 1, DP 2 x CP 2, DP 3 x CP 2), the
// replicas' media counts, a text-only replica, split frames cut across
// replicas, owner routing or the replicated path; with policy auto, each
// call's choice between the mesh and the CP-only plan.
//
// Losses are rank-specific: mesh rank (q, k) -- replica q, cp rank k --
// weighs the rows it receives with its own random weights (linear plus
// quadratic, so the gradient depends on the outputs). The reference loss of
// replica q is the sum of its cp ranks' losses; the mesh's gradients are
// SUM-all-reduced over the whole mesh and divided by dp, the reference's
// summed over replicas and divided by dp (the semantics of mesh_encode.h).
// A text-only replica's ranks take part in every collective, forward and
// backward (run_ranks' watchdog turns a hang into a failure).
//
// Errors are in mesh_encode_errors_test.cpp.

#include <frameshard/runtime/frame_keys.h>
#include <frameshard/runtime/mesh_encode.h>

#include "testing/mesh_problem.h"
#include "testing/run_ranks.h"
#include "testing/tensors.h"
#include "testing/test_tower.h"
#include "testing/token_owners.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>

#include <string>
#include <tuple>
#include <vector>

namespace frameshard {
namespace {

using testing::kMixedGrid;
using testing::max_abs_diff;
using testing::MeshGrid;

struct MeshCase {
  int dp = 2;
  int cp = 1;
  std::vector<MeshGrid> replicas;
  PlanOptions plan = testing::always_shard(1);  // world: dp * cp
  bool owners = false;
  bool frame_context = false;  // the tower of split frames (mesh_problem.h)
  uint64_t seed = 0;
  /// Repeated frames: {replica, unit, from replica, from unit}: the unit's
  /// pixel rows become a copy of the other's (equal shapes).
  std::vector<std::array<int, 4>> copies;
  bool dedup = false;  // MeshOptions::dedup, keys by frame_keys
  double min_gain = kDefaultMeshMinGain;  // policy auto's per-step choice
  std::vector<double> other_seconds;      // per mesh rank; empty: 0
};

struct MeshRankRun {
  EncodeResult res;
  std::vector<at::Tensor> grads;  // reduced over the mesh, divided by dp
  int allgathers = 0;
  int alltoalls_forward = 0;
  int alltoalls_total = 0;
  int64_t tower_rows = 0;  // pixel rows its tower got
};

struct MeshRun {
  std::vector<MeshRankRun> ranks;
  testing::MeshReference ref;
};

MeshRun run_mesh(const MeshCase& c) {
  torch::manual_seed(c.seed);
  testing::MeshProblem problem = testing::make_mesh_problem(
      c.replicas, c.cp, c.plan.layout, c.owners, c.frame_context);
  for (const auto& [q, unit, from_q, from_unit] : c.copies) {
    const FrameUnit a = expand_frames(c.replicas[q], c.plan.layout).units[unit];
    const FrameUnit b =
        expand_frames(c.replicas[from_q], c.plan.layout).units[from_unit];
    problem.pixels[q]
        .narrow(0, a.pixel_offset, a.patch_rows)
        .copy_(problem.pixels[from_q].narrow(0, b.pixel_offset, b.patch_rows));
  }
  MeshRun run;
  run.ref = testing::mesh_reference(problem, c.dp);
  run.ranks.resize(static_cast<size_t>(c.dp * c.cp));
  testing::run_ranks(c.dp * c.cp, [&](int rank, ProcessGroupPtr pg) {
    const int q = rank / c.cp;
    auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
    const testing::TestTowerParams mine =
        testing::leaf_copy(problem.params, true);
    EncodeOptions o;
    o.mesh.dp = c.dp;
    o.mesh.cp = c.cp;
    o.plan = c.plan;
    o.mesh.min_gain = c.min_gain;
    if (!c.other_seconds.empty()) {
      o.mesh.other_seconds = c.other_seconds[static_cast<size_t>(rank)];
    }
    o.token_owner = problem.owners[q];
    MeshRankRun& r = run.ranks[rank];
    const at::Tensor grid = grid_to_tensor(c.replicas[q]);
    if (c.dedup) {
      o.mesh.dedup = true;
      o.unit_keys = frame_keys(problem.pixels[q], grid, c.plan.layout);
    }
    const VisionTower tower = problem.tower(mine);
    r.res = encode_mesh(
        [&](const TowerInput& in) {
          r.tower_rows += in.pixel_values.size(0);
          return tower(in);
        },
        problem.pixels[q],
        grid_to_tensor(c.replicas[q]),
        counting,
        o);
    r.allgathers = counting->allgathers;
    r.alltoalls_forward = counting->alltoalls;
    const at::Tensor loss = problem.loss_of(rank, r.res.outputs);
    if (loss.defined() && loss.requires_grad()) {
      loss.backward();
    }
    r.alltoalls_total = counting->alltoalls;
    for (const at::Tensor& p : mine.list()) {
      const at::Tensor g = p.grad().defined() ? p.grad() : at::zeros_like(p);
      r.grads.push_back(testing::allreduce_sum(pg, g) / c.dp);
    }
  });
  return run;
}

/// Every rank's outputs are its replica's (or the rows it owns), and the
/// mesh's gradients are the per-replica run's.
void expect_mesh_parity(const MeshRun& run, const MeshCase& c) {
  for (int m = 0; m < c.dp * c.cp; ++m) {
    SCOPED_TRACE("mesh rank " + std::to_string(m));
    const MeshRankRun& r = run.ranks[m];
    const auto& want = run.ref.rank_outputs[m];
    const auto& tokens = run.ref.rank_tokens[m];
    if (want.empty() && !r.res.mesh.plan.sharded()) {
      EXPECT_TRUE(r.res.outputs.empty()) << "text-only, replicated";
      continue;
    }
    ASSERT_EQ(r.res.outputs.size(), testing::kMeshTowerOutputs);
    for (size_t i = 0; i < r.res.outputs.size(); ++i) {
      const int64_t rows = want.empty() ? 0 : want[i].size(0);
      ASSERT_EQ(r.res.outputs[i].size(0), rows) << "output " << i;
      if (rows > 0) {
        EXPECT_LE(max_abs_diff(r.res.outputs[i], want[i]), 1e-12)
            << "output " << i;
      }
    }
    if (c.owners) {
      EXPECT_EQ(r.res.tokens, tokens);
    }
    ASSERT_EQ(r.grads.size(), run.ref.grads.size());
    for (size_t p = 0; p < r.grads.size(); ++p) {
      EXPECT_LE(max_abs_diff(r.grads[p], run.ref.grads[p]), 1e-12)
          << "gradient of " << testing::kTestTowerParamNames[p];
    }
  }
  // The gradients are not trivially equal: they are large and every
  // parameter's differs from zero.
  for (size_t p = 0; p < run.ref.grads.size(); ++p) {
    EXPECT_GT(run.ref.grads[p].abs().max().item<double>(), 1e-3)
        << testing::kTestTowerParamNames[p];
  }
}

TEST(MeshEncode, TwoReplicasOfOneRankEachMatchTheirOwnRuns) {
  MeshCase c;  // DP 2 x CP 1: a DP-only job
  c.replicas = {kMixedGrid, {{1, 4, 8}}};
  c.seed = 1;
  const MeshRun run = run_mesh(c);
  const MeshPlan& mp = run.ranks[0].res.mesh;
  ASSERT_TRUE(mp.plan.sharded());
  EXPECT_EQ(mp.replica_media, (std::vector<int64_t>{0, 6, 7}));
  // The balance moved some of replica 0's frames to replica 1's rank.
  bool moved = false;
  for (int64_t u : mp.plan.ranks[1].units) {
    moved = moved || mp.replica_of_unit(u) == 0;
  }
  EXPECT_TRUE(moved);
  EXPECT_GT(run.ranks[1].res.pixel_bytes_received, 0);
  expect_mesh_parity(run, c);
}

TEST(MeshEncode, TwoReplicasOfTwoCpRanksMatchWithFiveCollectivesForward) {
  MeshCase c;
  c.dp = 2;
  c.cp = 2;
  c.replicas = {kMixedGrid, {{1, 8, 8}, {2, 4, 4}}};
  c.seed = 2;
  const MeshRun run = run_mesh(c);
  ASSERT_TRUE(run.ranks[0].res.mesh.plan.sharded());
  expect_mesh_parity(run, c);
  for (int m = 0; m < 4; ++m) {
    // Metadata lengths and consensus; metadata words, pixels, outputs; the
    // outputs' backward.
    EXPECT_EQ(run.ranks[m].allgathers, 2) << m;
    EXPECT_EQ(run.ranks[m].alltoalls_forward, 3) << m;
    EXPECT_EQ(run.ranks[m].alltoalls_total, 4) << m;
  }
}

TEST(MeshEncode, ThreeReplicasWithATextOnlyOneMatchAndNoRankSkipsACollective) {
  MeshCase c;
  c.dp = 3;
  c.cp = 2;
  c.replicas = {{{1, 8, 8}, {2, 4, 6}}, {}, kMixedGrid};
  c.seed = 3;
  const MeshRun run = run_mesh(c);
  const MeshPlan& mp = run.ranks[0].res.mesh;
  ASSERT_TRUE(mp.plan.sharded());
  expect_mesh_parity(run, c);
  for (int m : {2, 3}) {
    // Replica 1's ranks encode others' frames (or a dummy), receive no rows,
    // and run the same collectives as everyone, the backward's too.
    EXPECT_TRUE(
        !mp.plan.ranks[m].units.empty() || mp.plan.ranks[m].dummy_frames == 1);
    EXPECT_EQ(run.ranks[m].res.outputs[0].size(0), 0);
    EXPECT_EQ(run.ranks[m].alltoalls_total, run.ranks[0].alltoalls_total);
    EXPECT_EQ(run.ranks[m].allgathers, run.ranks[0].allgathers);
  }
}

TEST(MeshEncode, ATextOnlyReplicasRankEncodesItsNeighboursFrames) {
  MeshCase c;  // DP 2 x CP 1, all media on replica 0
  c.replicas = {{{1, 8, 8}, {1, 4, 4}, {1, 4, 4}, {1, 8, 8}}, {}};
  c.seed = 4;
  const MeshRun run = run_mesh(c);
  const MeshPlan& mp = run.ranks[1].res.mesh;
  ASSERT_TRUE(mp.plan.sharded());
  EXPECT_FALSE(mp.plan.ranks[1].units.empty());
  EXPECT_GT(run.ranks[1].res.pixel_bytes_received, 0);
  EXPECT_GT(run.ranks[1].res.bytes_sent, 0);  // its rows go back to rank 0
  expect_mesh_parity(run, c);
}

TEST(MeshEncode, SplitFramesCutAcrossReplicasMatchTheWholeFrameRun) {
  // One 64 x 64 page on replica 0: the planner cuts it, and pieces land on
  // other replicas' ranks, whose exchange runs over the mesh group.
  for (auto [dp, cp, second] :
       {std::tuple<int, int, MeshGrid>{2, 2, {{1, 8, 8}}},
        std::tuple<int, int, MeshGrid>{2, 1, {}}}) {
    SCOPED_TRACE("dp " + std::to_string(dp) + " cp " + std::to_string(cp));
    MeshCase c;
    c.dp = dp;
    c.cp = cp;
    c.replicas = {{{1, 64, 64}}, second};
    c.plan.split.enabled = true;
    c.frame_context = true;
    c.seed = 5;
    const MeshRun run = run_mesh(c);
    const MeshPlan& mp = run.ranks[0].res.mesh;
    ASSERT_TRUE(mp.plan.split);
    bool remote_piece = false;
    for (int m = cp; m < dp * cp; ++m) {
      for (int64_t u : mp.plan.ranks[m].units) {
        remote_piece = remote_piece || mp.replica_of_unit(u) == 0;
      }
    }
    EXPECT_TRUE(remote_piece);
    expect_mesh_parity(run, c);
  }
}

TEST(MeshEncode, OwnerRoutingDeliversEachRankOnlyItsRowsWithTheSameGradients) {
  for (int dp : {2, 3}) {
    SCOPED_TRACE("dp " + std::to_string(dp));
    MeshCase c;
    c.dp = dp;
    c.cp = 2;
    c.replicas = {kMixedGrid, {{1, 8, 8}, {2, 4, 4}}};
    if (dp == 3) {
      c.replicas.insert(c.replicas.begin() + 1, MeshGrid{});  // text-only
    }
    c.owners = true;
    c.seed = 6;
    const MeshRun run = run_mesh(c);
    ASSERT_TRUE(run.ranks[0].res.mesh.plan.sharded());
    expect_mesh_parity(run, c);
    const MeshPlan& mp = run.ranks[0].res.mesh;
    for (int q = 0; q < dp; ++q) {
      // Each of a replica's rows reaches exactly one of its cp ranks.
      int64_t received = 0;
      for (int k = 0; k < c.cp; ++k) {
        received += static_cast<int64_t>(
            run.ranks[q * c.cp + k].res.outputs[0].size(0));
      }
      EXPECT_EQ(received, mp.replica_tokens[q + 1] - mp.replica_tokens[q]);
    }
  }
}

TEST(MeshEncode, ReplicatedPathEncodesEachReplicaLocallyWithoutPayload) {
  for (const std::string mode : {"policy off", "owners", "no media"}) {
    SCOPED_TRACE(mode);
    const bool no_media = mode == "no media";
    MeshCase c;
    c.dp = 3;
    c.cp = 2;
    c.replicas = {kMixedGrid, {}, {{1, 8, 8}}};
    if (no_media) {
      c.replicas = {{}, {}, {}};
    }
    c.owners = mode == "owners";  // selected locally, no all-to-all
    c.plan.policy.enabled = false;
    c.seed = 7;
    const MeshRun run = run_mesh(c);
    for (int m = 0; m < 6; ++m) {
      const auto& r = run.ranks[m];
      EXPECT_FALSE(r.res.mesh.plan.sharded());
      EXPECT_EQ(r.res.bytes_sent + r.res.bytes_received, 0);
      // The metadata exchange and the consensus, nothing else.
      EXPECT_EQ(r.allgathers, 2) << m;
      EXPECT_EQ(r.alltoalls_total, 1) << m;
    }
    EXPECT_TRUE(run.ranks[2].res.outputs.empty()) << "text-only replica";
    if (!no_media) {
      expect_mesh_parity(run, c);
    }
  }
}

// A GRPO group spread over replicas: replica 0 holds images A, B, A and
// replica 1 holds B, A, B, C (A, B, C of different shapes).
MeshCase spread_group(int dp, int cp) {
  MeshCase c;
  c.dp = dp;
  c.cp = cp;
  c.replicas = {
      {{1, 8, 8}, {1, 4, 8}, {1, 8, 8}},
      {{1, 4, 8}, {1, 8, 8}, {1, 4, 8}, {1, 8, 4}}};
  c.copies = {{0, 2, 0, 0}, {1, 0, 0, 1}, {1, 1, 0, 0}, {1, 2, 0, 1}};
  if (dp == 3) {
    c.replicas.push_back({{1, 8, 8}, {1, 8, 4}});  // A and C again
    c.copies.push_back({2, 0, 0, 0});
    c.copies.push_back({2, 1, 1, 3});
  }
  c.dedup = true;
  c.seed = 8;
  return c;
}

TEST(MeshEncode, DedupEncodesEachDistinctFrameOnceInTheWholeMesh) {
  for (auto [dp, cp] : {std::pair<int, int>{2, 1}, {2, 2}, {3, 2}}) {
    SCOPED_TRACE("dp " + std::to_string(dp) + " cp " + std::to_string(cp));
    MeshCase c = spread_group(dp, cp);
    c.owners = cp == 2;
    const MeshRun run = run_mesh(c);
    const MeshPlan& mp = run.ranks[0].res.mesh;
    ASSERT_TRUE(mp.plan.sharded());
    EXPECT_EQ(mp.dedup.distinct_units, 3);
    EXPECT_EQ(mp.dedup.units, dp == 3 ? 9 : 7);
    expect_mesh_parity(run, c);
    // The mesh's towers see A, B and C once (64 + 32 + 32 rows) and a dummy
    // frame (4 rows) on each rank left without one.
    int64_t rows = 0;
    int64_t dummies = 0;
    for (int m = 0; m < dp * cp; ++m) {
      rows += run.ranks[m].tower_rows;
      dummies += mp.plan.ranks[m].dummy_frames;
    }
    EXPECT_EQ(rows, 128 + 4 * dummies);
  }
}

TEST(MeshEncode, DedupWithSplitFramesAndOnTheReplicatedPath) {
  MeshCase split = spread_group(2, 2);
  split.replicas[1].push_back({1, 32, 32});
  split.replicas[0].push_back({1, 32, 32});
  split.copies.push_back({1, 4, 0, 3});
  split.plan.split.enabled = true;
  split.plan.split.min_gain = 0.0;
  split.frame_context = true;
  const MeshRun run = run_mesh(split);
  ASSERT_TRUE(run.ranks[0].res.mesh.plan.split);
  EXPECT_EQ(run.ranks[0].res.mesh.dedup.distinct_units, 4);
  expect_mesh_parity(run, split);
  // The replicated path dedups within each replica.
  MeshCase local = spread_group(2, 2);
  local.plan.policy.enabled = false;
  const MeshRun rep = run_mesh(local);
  EXPECT_FALSE(rep.ranks[0].res.mesh.plan.sharded());
  expect_mesh_parity(rep, local);
  EXPECT_EQ(rep.ranks[0].tower_rows, 64 + 32);       // A, B
  EXPECT_EQ(rep.ranks[2].tower_rows, 32 + 64 + 32);  // B, A, C
  // Its counts say what the towers encoded: each replica's distinct frames.
  EXPECT_EQ(rep.ranks[0].res.mesh.dedup.units, 7);
  EXPECT_EQ(rep.ranks[0].res.mesh.dedup.distinct_units, 2 + 3);
  EXPECT_EQ(rep.ranks[0].res.mesh.dedup.distinct_patch_rows, 96 + 128);
}

TEST(MeshEncode, DedupWithoutRepeatsIsTheMeshWithoutDedup) {
  MeshCase on;
  on.dp = 2;
  on.cp = 2;
  on.replicas = {kMixedGrid, {{1, 8, 8}, {2, 4, 4}}};
  on.dedup = true;
  on.seed = 9;
  MeshCase off = on;
  off.dedup = false;
  const MeshRun a = run_mesh(on);
  const MeshRun b = run_mesh(off);
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(
        a.ranks[m].res.mesh.plan.fingerprint,
        b.ranks[m].res.mesh.plan.fingerprint);
    for (size_t i = 0; i < a.ranks[m].res.outputs.size(); ++i) {
      EXPECT_TRUE(
          at::equal(a.ranks[m].res.outputs[i], b.ranks[m].res.outputs[i]));
    }
    EXPECT_EQ(a.ranks[m].tower_rows, b.ranks[m].tower_rows);
  }
}

// --- Policy auto: the per-step choice (mesh_plan.h) ------------------------

MeshCase auto_case(int dp, int cp, std::vector<MeshGrid> replicas) {
  MeshCase c;
  c.dp = dp;
  c.cp = cp;
  c.replicas = std::move(replicas);
  c.plan.policy.kind = PolicyKind::kAuto;
  c.seed = 10;
  return c;
}

TEST(MeshChoice, BalancedReplicasRunCpOnlyWithThePixelsStayingHome) {
  const MeshGrid balanced = {{1, 8, 8}, {2, 4, 4}, {1, 8, 4}};
  for (const bool owners : {false, true}) {
    SCOPED_TRACE(owners ? "owners" : "all");
    MeshCase c = auto_case(2, 2, {balanced, balanced});
    c.owners = owners;
    const MeshRun run = run_mesh(c);
    const MeshPlan& mp = run.ranks[0].res.mesh;
    ASSERT_TRUE(mp.plan.sharded());
    ASSERT_EQ(mp.mode, MeshMode::kCpOnly) << mp.choice.reason;
    expect_mesh_parity(run, c);
    for (int m = 0; m < 4; ++m) {
      EXPECT_EQ(run.ranks[m].res.pixel_bytes_received, 0) << m;
      // Metadata and outputs forward (no pixel exchange), outputs backward.
      EXPECT_EQ(run.ranks[m].alltoalls_forward, 2) << m;
      EXPECT_EQ(run.ranks[m].alltoalls_total, 3) << m;
    }
  }
}

TEST(MeshChoice, CpOnlyAtCp1MovesNoPayloadAndStillMatches) {
  MeshCase c = auto_case(2, 1, {kMixedGrid, kMixedGrid});
  const MeshRun run = run_mesh(c);
  ASSERT_EQ(run.ranks[0].res.mesh.mode, MeshMode::kCpOnly);
  expect_mesh_parity(run, c);
  for (int m = 0; m < 2; ++m) {
    EXPECT_EQ(run.ranks[m].res.bytes_sent + run.ranks[m].res.bytes_received, 0);
    EXPECT_EQ(run.ranks[m].alltoalls_total, 1) << "the metadata only";
  }
}

TEST(MeshChoice, TheStragglerPoolsAndMatches) {
  MeshCase c = auto_case(2, 1, {{{1, 8, 8}, {1, 8, 8}, {1, 8, 8}}, {}});
  const MeshRun run = run_mesh(c);
  const MeshPlan& mp = run.ranks[1].res.mesh;
  ASSERT_EQ(mp.mode, MeshMode::kMesh) << mp.choice.reason;
  EXPECT_GT(mp.choice.gain(), 0.2);
  EXPECT_FALSE(mp.plan.ranks[1].units.empty());
  expect_mesh_parity(run, c);
}

TEST(MeshChoice, ALongTextStepOnTheLightReplicaKeepsItCpOnly) {
  // The straggler again, but replica 1's rest of the step (10 s, told by
  // one of its ranks) dwarfs replica 0's pages: pooling would make replica
  // 0 wait for it, so the step stays CP-only -- and still matches.
  MeshCase c = auto_case(2, 2, {{{1, 8, 8}, {1, 8, 8}, {1, 8, 8}}, {}});
  c.other_seconds = {0.0, 0.0, 0.0, 10.0};
  const MeshRun run = run_mesh(c);
  const MeshPlan& mp = run.ranks[0].res.mesh;
  ASSERT_EQ(mp.mode, MeshMode::kCpOnly) << mp.choice.reason;
  EXPECT_DOUBLE_EQ(mp.choice.mesh.other_seconds, 10.0);
  EXPECT_DOUBLE_EQ(mp.choice.cp_only.other_seconds, 10.0);
  expect_mesh_parity(run, c);
}

TEST(MeshChoice, CpOnlyWithSplitFramesAndWithDedupAcrossReplicasMatches) {
  // One page per replica at CP 2: the CP-only plan cuts each over its own
  // replica's ranks.
  MeshCase split = auto_case(2, 2, {{{1, 32, 32}}, {{1, 32, 32}}});
  split.plan.split.enabled = true;
  split.plan.split.min_gain = 0.0;
  split.frame_context = true;
  const MeshRun run = run_mesh(split);
  ASSERT_EQ(run.ranks[0].res.mesh.mode, MeshMode::kCpOnly);
  ASSERT_TRUE(run.ranks[0].res.mesh.plan.split);
  expect_mesh_parity(run, split);
  // A GRPO group spread over two replicas, forced CP-only: a frame first
  // used on replica 0 still reaches replica 1's uses (the output exchange
  // stays, at CP 1 too).
  MeshCase group = spread_group(2, 1);
  group.plan.policy.kind = PolicyKind::kAuto;
  group.min_gain = 0.99;
  const MeshRun grun = run_mesh(group);
  ASSERT_EQ(grun.ranks[0].res.mesh.mode, MeshMode::kCpOnly);
  expect_mesh_parity(grun, group);
  EXPECT_GT(grun.ranks[1].res.bytes_received, 0);
}

}  // namespace
}  // namespace frameshard
