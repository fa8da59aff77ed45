// frameshard::encode_mesh, multi-rank errors: a tower that throws on one
// rank (sharded, replicated, split frames), cp ranks of one replica passing
// different grids, a pixel or output dtype mismatch, a mesh group of the
// wrong size, options or owner maps that disagree, a bad input on one rank:
// every rank raises the same error, none hangs (run_ranks' watchdog).

#include <frameshard/runtime/mesh_encode.h>

#include "testing/mesh_problem.h"
#include "testing/rank_errors.h"
#include "testing/run_ranks.h"
#include "testing/test_tower.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using testing::expect_same_error_everywhere;
using testing::MeshGrid;
using testing::RankOutcome;

/// What one rank passes encode_mesh; a test may change it.
struct MeshRankCall {
  MeshGrid grid;
  at::Tensor pixels;
  EncodeOptions options;
  VisionTower tower;
};

struct MeshErrorCase {
  int world = 4;
  int dp = 2;
  int cp = 2;
  std::vector<MeshGrid> replicas = {
      testing::kMixedGrid, {{1, 8, 8}, {2, 4, 4}}};
  PlanOptions plan = testing::always_shard(1);
  bool frame_context = false;
};

std::vector<RankOutcome> run_mesh_errors(
    const MeshErrorCase& c,
    const std::function<void(int rank, MeshRankCall&)>& customize,
    const testing::RunRanksOptions& ropts = {}) {
  torch::manual_seed(11);
  const testing::MeshProblem problem = testing::make_mesh_problem(
      c.replicas, c.cp, c.plan.layout, false, c.frame_context);
  return testing::run_ranks_collect(
      c.world,
      [&](int rank, ProcessGroupPtr pg) {
        const auto q = static_cast<size_t>(std::min(rank / c.cp, c.dp - 1));
        const testing::TestTowerParams mine =
            testing::leaf_copy(problem.params, true);
        MeshRankCall call;
        call.grid = c.replicas[q];
        call.pixels = problem.pixels[q];
        call.options.mesh.dp = c.dp;
        call.options.mesh.cp = c.cp;
        call.options.plan = c.plan;
        call.tower = problem.tower(mine);
        customize(rank, call);
        const EncodeResult res = encode_mesh(
            call.tower,
            call.pixels,
            grid_to_tensor(call.grid),
            pg,
            call.options);
        const at::Tensor loss = problem.loss_of(rank, res.outputs);
        if (loss.defined() && loss.requires_grad()) {
          loss.backward();
        }
      },
      ropts);
}

void throw_on(int rank, int bad, MeshRankCall& call) {
  if (rank == bad) {
    call.tower = [](const TowerInput&) -> std::vector<at::Tensor> {
      throw std::runtime_error("boom in the tower");
    };
  }
}

void expect_mesh_error(
    const std::vector<RankOutcome>& outcomes, const std::string& needle) {
  expect_same_error_everywhere(outcomes, needle, "encode_mesh");
}

TEST(MeshEncodeErrors, ATowerThatThrowsOnOneRankRaisesTheSameErrorEverywhere) {
  MeshErrorCase sharded;
  expect_mesh_error(
      run_mesh_errors(sharded, [](int r, auto& call) { throw_on(r, 2, call); }),
      "rank 2 failed while running the tower: boom in the tower");

  MeshErrorCase replicated;  // a text-only replica runs no tower there
  replicated.dp = 2;
  replicated.replicas = {{}, testing::kMixedGrid};
  replicated.plan.policy.enabled = false;
  expect_mesh_error(
      run_mesh_errors(
          replicated, [](int r, auto& call) { throw_on(r, 3, call); }),
      "rank 3 failed while running the tower: boom in the tower");

  // Split frames: the others meet the failure in the tower's first piece
  // exchange, over the mesh group.
  MeshErrorCase split;
  split.replicas = {{{1, 64, 64}}, {{1, 8, 8}}};
  split.plan.split.enabled = true;
  split.frame_context = true;
  expect_mesh_error(
      run_mesh_errors(split, [](int r, auto& call) { throw_on(r, 1, call); }),
      "rank 1 failed while running the tower: boom in the tower");
}

TEST(MeshEncodeErrors, CpRanksOfOneReplicaWithDifferentGridsNameTheRow) {
  MeshErrorCase c;
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 3) {
              call.grid = {{1, 8, 8}, {1, 4, 8}};
              call.pixels =
                  at::randn({96, testing::kTestFeatures}, at::kDouble);
            }
          }),
      "cp ranks of replica 1 disagree on grid_thw row 1: rank 2 has (2, 4, "
      "4), rank 3 has (1, 4, 8) (every cp rank of a replica passes that "
      "replica's inputs)");
  // One cp rank of a replica believing it is text-only.
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 1) {
              call.grid = {};
              call.pixels = at::zeros({0, testing::kTestFeatures}, at::kDouble);
            }
          }),
      "cp ranks of replica 0 disagree on grid_thw rows: rank 0 has 6, rank "
      "1 has 0");
}

TEST(MeshEncodeErrors, ADtypeMismatchRaisesEverywhere) {
  MeshErrorCase c;
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 1) {
              call.pixels = call.pixels.to(at::kFloat);
            }
          }),
      "ranks disagree on the pixel_values dtype: rank 0 has Double, rank 1 "
      "has Float");
  // A tower whose outputs come back in another dtype on one rank.
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 3) {
              call.tower = [inner = call.tower](const TowerInput& in) {
                std::vector<at::Tensor> outs = inner(in);
                for (auto& o : outs) {
                  o = o.to(at::kFloat);
                }
                return outs;
              };
            }
          }),
      "ranks disagree on the output dtype: rank 0 has Double, rank 3 has "
      "Float");
}

// Megatron-Bridge #4784: a rank whose own rows need no gradient (here a
// text-only replica's rank with a frozen copy of the tower) while the
// others' do must still run the backward all-to-all, or they time out.
TEST(MeshEncodeErrors, ARankWhoseOutputsNeedNoGradientStillJoinsTheBackward) {
  MeshErrorCase c;
  c.replicas = {testing::kMixedGrid, {}};
  testing::RunRanksOptions ropts;
  ropts.timeout = std::chrono::milliseconds(3000);
  const auto outcomes = run_mesh_errors(
      c,
      [](int rank, MeshRankCall& call) {
        if (rank == 2) {
          call.tower = testing::detached_outputs(call.tower);
        }
      },
      ropts);
  testing::expect_ok_everywhere(outcomes);
}

TEST(MeshEncodeErrors, AMeshGroupOfTheWrongSizeRaisesEverywhere) {
  MeshErrorCase c;
  c.world = 3;  // dp * cp = 4
  expect_mesh_error(
      run_mesh_errors(c, [](int, MeshRankCall&) {}),
      "ranks 0, 1, 2 failed; rank 0 failed while checking its inputs: "
      "frameshard::encode_mesh: [rank 0/3] expected a mesh group of dp * cp "
      "= 4 ranks (mesh rank = replica * cp + cp_rank), got 3 (a trainable "
      "tower's gradient all-reduce must span that whole mesh)");
}

TEST(MeshEncodeErrors, DisagreeingOptionsOwnersOrInputsRaiseEverywhere) {
  MeshErrorCase c;
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 2) {
              call.options.plan.partitioner = Partitioner::kLpt;
            }
          }),
      "ranks disagree on the plan options: rank 0 has fingerprint 0x");
  // Owner routing on replica 0 only: replica 1's rows would have no owner.
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank < 2) {
              call.options.token_owner.assign(31, rank);
            }
          }),
      "cp ranks of replica 0 disagree on token_owner: rank 0 has "
      "fingerprint 0x");
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank < 2) {
              call.options.token_owner.assign(31, 1);
            }
          }),
      "expected a token_owner from every replica with visual tokens once one "
      "passes it (replica 0 does), got none from replica 1");
  // A local failure: pixel rows that do not match the grid.
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 1) {
              call.pixels = call.pixels.narrow(0, 0, 4);
            }
          }),
      "rank 1 failed while checking its inputs: frameshard::check_pixel_rows");
}

TEST(MeshEncodeErrors, BadMeshChoiceInputsOnOneRankRaiseEverywhere) {
  MeshErrorCase c;
  c.plan.policy.kind = PolicyKind::kAuto;
  // A rest-of-step prediction that is not a time.
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            if (rank == 3) {
              call.options.mesh.other_seconds = -1.0;
            }
          }),
      "expected other_seconds finite and >= 0, got -1");
  // Ranks that price an exchange differently would choose differently.
  expect_mesh_error(
      run_mesh_errors(
          c,
          [](int rank, MeshRankCall& call) {
            call.options.mesh.exchange_latency_seconds = rank == 0 ? 1e-3 : 0.0;
          }),
      "ranks disagree on the plan options: rank 0 has fingerprint 0x");
}

}  // namespace
}  // namespace frameshard
