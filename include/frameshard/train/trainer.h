// File: frameshard/train/trainer.h
//
// One arm of the training job on one rank: a small VLM (a Qwen-VL-family
// tower and the CP decoder of decoder.h), AdamW, and a step that
//   1. builds the step's batch (data_batch.h; one packed sequence per DP
//      replica, the same on every CP rank of it) and its pixel values;
//   2. encodes the media with frameshard::encode: the sharded arm runs the
//      tower on this rank's frames and gathers the outputs; the replicated
//      arm (sharding off) runs it on every frame on every CP rank, as the
//      baseline of the seeds does. With frame_sharding.mesh_dims [dp, cp]
//      and dp_size > 1 the sharded arm calls frameshard::encode_mesh over
//      the world group instead: the frames of every replica's batch are
//      balanced over all dp * cp ranks and each rank gets its own
//      replica's rows back (frameshard/runtime/mesh_encode.h); a replica
//      whose batch is text-only still joins every collective. With
//      policy auto each step weighs that pooled plan against the CP-only
//      one (frameshard/mesh_plan.h), telling encode_mesh its predicted
//      rest of the step: the last step's decoder seconds per sequence
//      position times this batch's length. A text-only
//      batch on the CP path skips the tower on every rank of its group.
//      With frame_sharding.dedup the sharded arm hashes each frame unit's
//      pixel rows (frameshard/runtime/frame_keys.h) and encodes each
//      distinct unit once: in its CP group, over the whole mesh with
//      mesh_dims [dp, cp] (a GRPO group spread over the replicas once), or,
//      with frame sharding off, on each rank alone (AReaL's rank-local
//      dedup); every use gets its unit's rows and the backward sums their
//      gradients (frameshard/dedup.h), so losses and gradients stay those
//      of the run without dedup. The replicated arm never dedups;
//   3. places the visual embeddings at the media positions of this rank's
//      two load-balanced chunks (with frame_sharding.gather: owner, encode
//      sends this rank only those rows, frameshard/owner_route.h; with
//      all, every rank receives all and picks its own), DeepStack features
//      added after the first decoder blocks), runs the decoder with attention
//      across the CP ranks and takes the next-token loss of its positions
//      (summed, divided by the replica's label count, so the CP ranks' losses
//      add up to the replica's mean);
//   4. runs backward in three timed phases (decoder; the gather's
//      reduce-scatter; the tower, recomputed first under
//      model.vision_checkpointing), which equals one backward because each
//      phase hands the next the gradient of its inputs;
//   5. all-reduces the gradients over DP x CP (sum, divided by dp) and
//      steps AdamW. Over the whole world on purpose: on the mesh path a
//      rank's tower gradients hold other replicas' frames, and only the
//      whole-mesh sum gives (1/dp) sum over replicas and CP ranks of
//      dL/dtheta, the standard run's gradient (mesh_encode.h).
// Both arms compute the same function with the same seed and data, so their
// losses and gradients agree to rounding. With frame_sharding.cost_alpha
// online the sharded arm plans with a cost model it learns from its own
// tower times (frameshard/online_cost.h; src/train/online_step.h): after the
// tower's backward each rank's workload and seconds are all-gathered (one
// more collective per step, world x 7 doubles) and every rank of a CP
// group updates the same model; StepMetrics reports it.
//
// Usage:
//   frameshard::train::TrainGroups g{world_group, cp_group, rank, world};
//   frameshard::train::Trainer t(cfg, g, /*sharded=*/true);
//   for (int64_t s = 0; s < cfg.train.steps; ++s) {
//     frameshard::train::StepMetrics m = t.step(s);
//   }
//
// Collective: the constructor (config agreement) and every step, over the
// world group (every rank, same config).
#pragma once

#include <frameshard/online_cost.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/train/data_batch.h>
#include <frameshard/train/decoder.h>
#include <frameshard/train/memory_stats.h>
#include <frameshard/train/train_config.h>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace train {

/// The groups a rank trains in: `world` spans DP x CP (row-major, dp
/// outermost: global rank = dp_rank * cp + cp_rank), `cp` this rank's CP
/// group (the world group itself when dp == 1; may be null when cp == 1).
struct TrainGroups {
  ProcessGroupPtr world;
  ProcessGroupPtr cp;
  c10::Device device = c10::Device(c10::kCPU);
};

/// What one rank measured in one step.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0.0;                  // the global loss (same on every rank)
  double step_seconds = 0.0;          // whole step, data to optimizer
  double vision_seconds = 0.0;        // tower forward + backward (+ recompute)
  double vision_cpu_seconds = 0.0;    // the same in this rank thread's CPU
                                      // time (CPU ranks: cores shared by
                                      // several ranks do not inflate it)
  double gather_seconds = 0.0;        // encode's plan, consensus and gather,
                                      // and the gather's backward
  double hash_seconds = 0.0;          // frame_keys of the pixels (dedup)
  double decoder_seconds = 0.0;       // decoder forward + backward
  int64_t peak_bytes = 0;             // peak tensor bytes over the step
  int64_t vision_peak_bytes = 0;      // peak above the step's start during the
                                      // tower's forward (its activations)
  int64_t tower_rows = 0;             // patch rows this rank's tower ran on
  int64_t visual_bytes_received = 0;  // in the vision collective
  int64_t allgather_bytes_received = 0;  // what the all-gather would move
  std::string plan_path;                 // "sharded" or "replicated"
  // Frame units and patch rows of this rank's replica's batch (all uses),
  // and the distinct ones the arm encodes on its behalf: equal without
  // frame_sharding.dedup; with it the replica's distinct units (CP path),
  // or on the sharded dp x cp mesh the mesh's distinct units first used in
  // this replica. The job's step: the sum over replicas (one rank each).
  int64_t frames_total = 0;
  int64_t frames_distinct = 0;
  int64_t rows_total = 0;
  int64_t rows_distinct = 0;
  // A sharded step over the dp x cp mesh: the plan it ran ("mesh" or
  // "cp-only", frameshard/mesh_plan.h MeshMode; "" off the mesh or on its
  // replicated path) and, with policy auto, the predicted gain of the mesh
  // over the CP-only plan (1 - mesh / cp-only; 0 when not weighed).
  std::string mesh_mode;
  double mesh_gain = 0.0;
  // The cost model this step planned with (its label; with cost_alpha
  // online on the sharded arm OnlineCost::in_force().describe(): "online
  // (...FLOPs...)" until a fit is in force, then "online: a=...").
  std::string cost_model;
  // cost_alpha online only (train/online_step.h; 0, false and "" without):
  // the slowest tower (forward + backward) over the ranks that ran one, as
  // the model in force predicted it and as measured (every rank's samples:
  // the same on every rank of the world); whether this step's update put a
  // new model in force, what it decided (OnlineCost::why()) and the model
  // the next step plans with.
  double predicted_slowest_seconds = 0.0;
  double measured_slowest_seconds = 0.0;
  bool cost_switched = false;
  std::string cost_update;
  std::string cost_model_next;
};

class Trainer {
 public:
  /// Builds the model (seeded: identical on every rank), the optimizer and
  /// the data source; checks the groups against the config and that every
  /// rank runs the same config (frameshard::agree). Collective.
  Trainer(const TrainConfig& config, const TrainGroups& groups, bool sharded);
  ~Trainer();

  /// One training step (forward_backward, then the optimizer). Collective.
  StepMetrics step(int64_t step);
  /// Steps 1-4 of the banner plus the gradient all-reduce, without the
  /// optimizer: the gradients stay in the parameters. Collective.
  StepMetrics forward_backward(int64_t step);

  /// Every trainable parameter, tower first ("tower.<hf name>", then
  /// "decoder.<name>").
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  /// The batch of `step` on this rank's DP replica.
  BatchLayout batch(int64_t step) const;
  /// The plan options of this arm (train_config.h, arm_plan_options).
  const PlanOptions& plan_options() const;
  /// The plan of the last step's vision (encode's; over the dp x cp mesh,
  /// encode_mesh's); empty before the first step and after a text-only one.
  const ShardPlan& vision_plan() const;
  /// cost_alpha online on the sharded arm: the online cost model after the
  /// last step (the same on every rank of a CP group); else null.
  const OnlineCost* online_cost() const;
  int64_t dp_rank() const;
  int64_t cp_rank() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The pixel rows [rows, features] of `batch` (DP replica `dp_rank`'s at
/// `step`) as the trainer draws them, on the CPU: one seeded draw per
/// (data.seed, step, dp_rank), or, where the batch sets media_seed (the
/// grpo preset), each medium's rows from its own seed, so a repeated medium
/// has bit-identical rows in every sample and replica that holds it.
at::Tensor batch_pixels(
    const BatchLayout& batch,
    const DataConfig& data,
    int64_t step,
    int64_t dp_rank,
    int64_t features,
    at::ScalarType dtype);

/// Gathers every rank's metrics of one step over the world group: entry q
/// is rank q's. Collective.
std::vector<StepMetrics> gather_step_metrics(
    const StepMetrics& mine, const TrainGroups& groups);

}  // namespace train
}  // namespace frameshard
