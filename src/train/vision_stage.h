// !!! Internal header of frameshard::train, not installed. !!!
//
// The vision stage of a training step, timed apart from the rest:
// frameshard::encode runs the tower through a wrapper that records the
// tower's own time and outputs and hands encode detached copies ("leaves")
// instead, so the gather and the tower backward can be run, and timed, as
// separate phases after the decoder's backward:
//   forward:   encode(wrapper) -> outputs (gathered, or the tower's own
//              outputs on the replicated path)
//   backward:  backward_gather(grads of outputs)  -> grads of the leaves
//              backward_tower()                   -> tower parameter grads
// which is one backward split at the tower's outputs. With checkpointing
// the forward runs without saving activations and backward_tower runs the
// tower again with grad first (activation checkpointing of the whole tower).
// forward_mesh is the same over the whole dp x cp mesh (encode_mesh,
// mesh_dims [dp, cp]); skip() is a step without vision (a text-only batch
// on the CP path, where every rank of the CP group skips alike).
//
// With dedup (frame_sharding.dedup on the sharded arm) the stage hashes
// the pixel rows (frame_keys, timed as hash_seconds, apart from the tower
// and the gather; the CP ranks of a replica each hash a share of its media
// and all-gather the keys, so the group hashes the batch once) and passes
// the keys to encode / encode_mesh, which then run the tower on each
// distinct frame unit once. It counts, per step, the
// frame units and patch rows of this rank's replica (uses) and the distinct
// ones the arm encodes on its behalf: all of them without dedup; its
// replica's distinct units on the CP path and on the mesh's replicated
// path; on the mesh's sharded path the mesh's distinct units whose first
// use is in this replica, so the replicas' counts add up to the mesh's.
// Defined in src/train/vision_stage.cpp.
#pragma once

#include <frameshard/online_cost.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/mesh_encode.h>
#include <frameshard/train/memory_stats.h>
#include <frameshard/train/trainer.h>

#include <string>

#include <ATen/ATen.h>

#include <chrono>
#include <vector>

namespace frameshard {
namespace train {
namespace detail {

struct FrameCounts {
  int64_t frames_total = 0;
  int64_t frames_distinct = 0;
  int64_t rows_total = 0;
  int64_t rows_distinct = 0;
};

class VisionStage {
 public:
  /// `dedup`: hash the pixels and encode each distinct unit once;
  /// `layout` is the tower's (frame units, keys).
  VisionStage(
      VisionTower tower,
      bool checkpointing,
      MemoryStats* memory,
      bool dedup = false,
      MediaLayout layout = {});

  /// Runs encode; returns its outputs, detached into leaves that require
  /// grad (the decoder's inputs). Collective over `group`.
  std::vector<at::Tensor> forward(
      const at::Tensor& pixel_values,
      const at::Tensor& grid_thw,
      const ProcessGroupPtr& group,
      const EncodeOptions& options);
  /// The same through encode_mesh over `mesh_group` (dp * cp ranks):
  /// `pixel_values` and `grid_thw` are this rank's replica's. Returns
  /// nothing for a text-only replica on the replicated path (no tower ran).
  /// With dedup, options.mesh.dedup and unit_keys are set here, the pixels
  /// hashed over `hash_group` (this replica's CP group; null: alone).
  std::vector<at::Tensor> forward_mesh(
      const at::Tensor& pixel_values,
      const at::Tensor& grid_thw,
      const ProcessGroupPtr& mesh_group,
      const EncodeOptions& options,
      const ProcessGroupPtr& hash_group = nullptr);
  /// A step without vision: the timings and rows read 0.
  void skip();

  /// Gradients of forward's outputs -> gradients of the tower's outputs
  /// (the gather's reduce-scatter on the sharded path). Collective.
  void backward_gather();
  /// The tower's backward (after its recomputation under checkpointing).
  void backward_tower();

  double tower_seconds() const {
    return tower_seconds_;
  }
  /// The tower's CPU time on this rank's thread (forward + backward):
  /// with one torch thread per rank, what the tower costs on a core of its
  /// own, however many ranks share the machine's cores (0 for CUDA work,
  /// which the thread only launches).
  double tower_cpu_seconds() const {
    return tower_cpu_seconds_;
  }
  double gather_seconds() const {
    return gather_seconds_;
  }
  /// frame_keys' time this step (0 without dedup).
  double hash_seconds() const {
    return hash_seconds_;
  }
  /// This step's frame units and patch rows, all uses and distinct (see
  /// the banner).
  const FrameCounts& frame_counts() const {
    return counts_;
  }
  int64_t tower_peak_bytes() const {
    return tower_peak_bytes_;
  }
  /// The step's peak bytes before the tower's window began (the window
  /// restarts the allocator's peak; see run_tower).
  int64_t peak_before_tower() const {
    return peak_before_tower_;
  }
  int64_t tower_rows() const {
    return tower_rows_;
  }
  /// The tower call of this step as cost_alpha online samples it
  /// (call_workload of its segments, grid and pieces: frames, pieces, floor
  /// and dummy frames); an empty sample (calls 0) when it did not run.
  /// What train/online_step.h fits.
  WorkloadSample tower_workload(
      const CostModel& flops, bool split, double seconds) const;
  /// Visual bytes this rank received in the forward collective, and what
  /// the all-gather would have brought (EncodeResult).
  int64_t bytes_received() const {
    return bytes_received_;
  }
  int64_t allgather_bytes_received() const {
    return allgather_bytes_received_;
  }
  const ShardPlan& plan() const {
    return plan_;
  }
  /// forward_mesh on the sharded path: "mesh" or "cp-only" (MeshMode) and
  /// the choice's predicted gain; "" and 0 otherwise.
  const std::string& mesh_mode() const {
    return mesh_mode_;
  }
  double mesh_gain() const {
    return mesh_gain_;
  }

 private:
  std::vector<at::Tensor> run_tower(const TowerInput& input);
  void begin_step();
  std::vector<UnitKey> hash(
      const at::Tensor& pixel_values,
      const at::Tensor& grid_thw,
      const ProcessGroupPtr& group,
      std::chrono::milliseconds timeout);
  void count_frames(const at::Tensor& grid_thw, const FrameDedup& dedup);
  void count_mesh_frames(
      const at::Tensor& grid_thw,
      const MeshPlan& plan,
      int64_t replica,
      const std::vector<UnitKey>& keys);
  std::vector<at::Tensor> keep_outputs(
      std::vector<at::Tensor> outputs,
      c10::Device device,
      std::chrono::steady_clock::time_point start);

  VisionTower tower_;
  bool checkpointing_;
  MemoryStats* memory_;
  bool dedup_;
  MediaLayout layout_;
  // Per step:
  TowerInput input_;                   // what the tower saw (recompute)
  std::vector<at::Tensor> tower_out_;  // its outputs (graph unless ckpt)
  std::vector<at::Tensor> tower_leaf_;
  std::vector<at::Tensor> encoded_;  // encode's outputs (graph: gather)
  std::vector<at::Tensor> encoded_leaf_;
  ShardPlan plan_;
  std::string mesh_mode_;
  double mesh_gain_ = 0.0;
  double tower_seconds_ = 0.0;
  double tower_cpu_seconds_ = 0.0;
  double gather_seconds_ = 0.0;
  double hash_seconds_ = 0.0;
  FrameCounts counts_;
  int64_t tower_peak_bytes_ = 0;
  int64_t peak_before_tower_ = 0;
  int64_t tower_rows_ = 0;
  at::Tensor tower_cu_seqlens_;  // the tower's segments (tower_workload)
  at::Tensor tower_grid_;        // and its local grid
  std::vector<FramePiece> tower_pieces_;
  int64_t bytes_received_ = 0;
  int64_t allgather_bytes_received_ = 0;
};

/// The stage's share of a step's metrics (timings, counts, rows, bytes,
/// plan path and mesh choice) after its backward.
void read_vision_metrics(const VisionStage& vision, StepMetrics& m);

/// Seconds since `start` after waiting for the device (CUDA kernels are
/// asynchronous; a CPU returns at once).
double elapsed_seconds(
    std::chrono::steady_clock::time_point start, c10::Device device);

/// CPU seconds the calling thread has run (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

}  // namespace detail
}  // namespace train
}  // namespace frameshard
