// File: tests/train/mesh_groups.h
//
// The groups of the ranks of a dp x cp mesh for the trainer tests
// (mesh_trainer_test.cpp, dedup_trainer_test.cpp, online_trainer_test.cpp):
// cp_group is a rank's CP group -- the world group itself at dp 1, else its
// cp subgroup (mesh_group_ranks order), made over `store`, which every rank
// of the run shares; run_mesh_ranks runs dp * cp ranks as threads
// (testing::run_ranks), each with its world and CP group on the CPU.
//
// Usage:
//   testing::run_mesh_ranks(dp, cp, 20s, [&](int rank,
//                                            const train::TrainGroups& g) {
//     train::Trainer t(cfg, g, /*sharded=*/true);
//   });
//
// Collective: every rank of the mesh calls cp_group (the subgroups
// rendezvous).
#pragma once

#include <frameshard/runtime/process_group.h>
#include <frameshard/train/trainer.h>

#include "testing/run_ranks.h"

#include <chrono>
#include <cstdint>

namespace frameshard {
namespace testing {

inline ProcessGroupPtr cp_group(
    const ProcessGroupPtr& world,
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int64_t dp,
    int64_t cp,
    std::chrono::milliseconds timeout) {
  if (dp == 1) {
    return world;
  }
  GroupOptions go;
  go.timeout = timeout;
  go.threads = 1;
  const MeshShape shape{dp, cp, 1};
  return make_subgroup(
      store, rank, mesh_group_ranks(shape, {"cp"}, rank), "cp", go);
}

/// fn(rank, groups) on each of dp * cp ranks; collectives (and the CP
/// subgroups' rendezvous) time out after `timeout`.
template <typename Fn>
void run_mesh_ranks(
    int64_t dp, int64_t cp, std::chrono::milliseconds timeout, Fn fn) {
  // The CP subgroups rendezvous over their own store.
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(timeout);
  RunRanksOptions o;
  o.timeout = timeout;
  run_ranks(
      static_cast<int>(dp * cp),
      [&](int rank, ProcessGroupPtr pg) {
        const ProcessGroupPtr cpg = cp_group(pg, store, rank, dp, cp, timeout);
        fn(rank, train::TrainGroups{pg, cpg, c10::Device(c10::kCPU)});
      },
      o);
}

}  // namespace testing
}  // namespace frameshard
