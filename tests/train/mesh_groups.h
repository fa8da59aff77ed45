// File: tests/train/mesh_groups.h
//
// The CP group of a rank of a dp x cp mesh for the trainer tests
// (mesh_trainer_test.cpp, dedup_trainer_test.cpp): the world group itself at
// dp 1, else the rank's cp subgroup (mesh_group_ranks order), made over
// `store`, which every rank of the run shares.
//
// Usage (on each rank's thread of testing::run_ranks):
//   ProcessGroupPtr cpg = testing::cp_group(pg, store, rank, dp, cp, 20s);
//
// Collective: every rank of the mesh calls it (the subgroups rendezvous).
#pragma once

#include <frameshard/runtime/process_group.h>

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

}  // namespace testing
}  // namespace frameshard
