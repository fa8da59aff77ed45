// File: frameshard/runtime/process_group.h
//
// Creating the c10d process groups the runtime runs on. The runtime itself
// takes any c10::intrusive_ptr<c10d::ProcessGroup> (built here, or handed in
// from Python); these helpers cover the common cases:
//   * Gloo over a given store, a file store, or the torchrun environment
//     (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT);
//   * NCCL when built with FRAMESHARD_WITH_NCCL (a CUDA LibTorch);
//   * splitting a world of DP x CP x TP ranks (row-major, dp outermost) into
//     the groups that span `mesh_dims` (normally just "cp").
//
// Usage:
//   auto pg = frameshard::make_file_store_group("/tmp/fs_store", rank, 2);
//   // or, under torchrun:
//   auto pg = frameshard::make_group_from_env();
//   // CP groups of a dp=2, cp=2 world (4 ranks): {0,1} and {2,3}
//   auto members = frameshard::mesh_group_ranks({2, 2, 1}, {"cp"}, rank);
//   auto cp = frameshard::make_subgroup(store, rank, members, "cp");
//
// Collective: every group constructor is collective over the group's members
// (they rendezvous through the store). A rendezvous that cannot complete is
// an error naming the rank, the store and the timeout, on every rank that
// waits ("expected all 3 ranks to join through the file store /tmp/s within
// 60000 ms ..."), never a silent wait; ranks that disagree on the group's
// size are told at once (the first to reach the store records its size,
// under the store key "frameshard/group_size"; groups sharing a store use
// prefix stores, as make_subgroup does).
//
// Signals: Gloo writes to its peers' sockets; when a peer has died, such a
// write raises SIGPIPE, whose default action kills the process. Python (and
// so torch.distributed) ignores SIGPIPE; a C++ program should do the same
// (`std::signal(SIGPIPE, SIG_IGN)` in main, as the frameshard tool and tests
// do) so that a dead peer becomes an error on the survivors. A library does
// not change process-wide signal handling behind the caller's back.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

struct GroupOptions {
  /// Default timeout of every collective on the group; a peer that dies
  /// becomes an error on the others within it.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// Interface Gloo binds to (loopback for single-machine runs).
  std::string hostname = "127.0.0.1";
  /// Gloo worker threads per group.
  int threads = 2;
  /// make_group_from_env only: "gloo", "nccl" (CUDA tensors; the rank's
  /// device is LOCAL_RANK, made current on the calling thread; needs a
  /// build with FRAMESHARD_WITH_NCCL), or "auto" (nccl when built with it
  /// and a CUDA device is present, else gloo). An NCCL group also holds a
  /// Gloo backend for CPU tensors.
  std::string backend = "gloo";
};

/// Gloo group of `size` ranks rendezvousing through `store`.
ProcessGroupPtr make_gloo_group(
    const StorePtr& store,
    int rank,
    int size,
    const GroupOptions& options = {});

/// Gloo group over a c10d::FileStore at `path` (shared file system).
ProcessGroupPtr make_file_store_group(
    const std::string& path,
    int rank,
    int size,
    const GroupOptions& options = {});

/// The launcher's environment, validated (missing or malformed variables
/// are errors naming the variable): torchrun's RANK, WORLD_SIZE, LOCAL_RANK;
/// else SLURM's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; else Open MPI's
/// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} or PMI_RANK, PMI_SIZE. The
/// rendezvous is always MASTER_ADDR:MASTER_PORT (rank 0 hosts a TCPStore).
struct LaunchEnv {
  std::string launcher = "torchrun";  // torchrun | slurm | openmpi | pmi
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};
LaunchEnv read_launch_env();
/// Whether any launcher's rank variable (RANK, SLURM_PROCID,
/// OMPI_COMM_WORLD_RANK, PMI_RANK) is set: a process started by a launcher.
bool launcher_env_present();

/// The TCPStore at env.master_addr:master_port (rank 0 hosts it, unless
/// torchrun's agent does: TORCHELASTIC_USE_AGENT_STORE=True), e.g. for
/// subgroups (make_subgroup) next to the world group.
StorePtr make_store_from_env(
    const LaunchEnv& env,
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// Group over a TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it), of
/// options.backend (Gloo by default).
ProcessGroupPtr make_group_from_env(const GroupOptions& options = {});

/// Whether this build compiled the NCCL path (FRAMESHARD_WITH_NCCL).
bool nccl_compiled();

/// NCCL group (CUDA builds), for CUDA tensors on the calling thread's
/// current device, with a Gloo backend for CPU tensors. In a build without
/// the NCCL path (nccl_compiled() false) an error that says so.
ProcessGroupPtr make_nccl_group(
    const StorePtr& store,
    int rank,
    int size,
    const GroupOptions& options = {});

/// World shape, row-major with dp outermost and tp innermost:
/// global rank = (dp_index * cp + cp_index) * tp + tp_index.
struct MeshShape {
  int64_t dp = 1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t size() const {
    return dp * cp * tp;
  }
};

/// Global ranks of the group containing `global_rank` that spans
/// `mesh_dims` (a subset of {"dp", "cp", "tp"}), ascending.
std::vector<int> mesh_group_ranks(
    const MeshShape& shape,
    const std::vector<std::string>& mesh_dims,
    int global_rank);

/// Every such group of the world, each ascending, ordered by first member.
std::vector<std::vector<int>> mesh_groups(
    const MeshShape& shape, const std::vector<std::string>& mesh_dims);

/// Gloo subgroup of `members` (global ranks, containing `global_rank`) over
/// a PrefixStore named by `tag` and the members. Collective over members.
ProcessGroupPtr make_subgroup(
    const StorePtr& store,
    int global_rank,
    const std::vector<int>& members,
    const std::string& tag,
    const GroupOptions& options = {});

}  // namespace frameshard
