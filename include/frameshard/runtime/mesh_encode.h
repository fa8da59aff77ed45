// File: frameshard/runtime/mesh_encode.h
//
// Encode over the data x context-parallel mesh (frame_sharding.mesh_dims
// [dp, cp]): every data-parallel replica brings its own batch, and the
// vision work of all of them is balanced over all dp * cp ranks
// (frameshard/mesh_plan.h), so a replica with three document pages and a
// text-only neighbour no longer make every step wait for the first. Each
// rank passes ITS OWN replica's pixel_values and grid_thw (the cp ranks of
// a replica pass the same); mesh rank = replica * cp + cp_rank.
//
// Steps (every rank, the same collectives in the same order):
//   a. metadata: one small exchange (an all-gather of lengths, then one
//      all_gather_rows) of every rank's grid rows, pixel dtype and feature
//      width, owner map, mesh shape, option fingerprint and local-check
//      error; a bad input or a disagreement raises the same error on every
//      rank before any payload moves;
//   b. the mesh plan (make_mesh_plan), the same on every rank; with
//      policy auto, the pooled plan or the CP-only one (each replica's
//      frames over its own cp ranks), whichever the step's prediction
//      favours by min_gain (frameshard/mesh_plan.h, MeshPlan::mode);
//   c. pixel rows to the ranks that encode them: ONE all-to-all
//      (mesh_pixel_route), then floor and dummy zero frames as encode
//      appends them;
//   d. the tower on the local frames (split frames: the piece exchange over
//      the mesh group, runtime/encode.h);
//   e. the consensus of encode (plan fingerprint, rows, dtype, widths,
//      requires-grad, errors): a tower failure on one rank raises on all;
//   f. outputs to their replica's ranks: ONE all-to-all (mesh_output_route),
//      fused along the feature dim, back into this replica's token order.
// Sharded path per call: 2 all-gathers and 3 all-to-alls forward, 1
// all-to-all backward (the CP-only plan skips the pixel all-to-all, whose
// rows never leave their replica, and at cp 1 without frames shared across
// replicas the output all-to-all and its backward too: every rank knows it
// from the plan) (plus, with split frames, the piece exchange's
// all-gather and all-to-all per full-attention layer, and its backward).
// Replicated path (policy below its thresholds, sharding off, dp * cp == 1
// or no media on any replica): the metadata exchange and the consensus
// only (2 all-gathers, 1 all-to-all); each rank encodes its own replica's
// frames, and a text-only replica's ranks run no tower and get no outputs
// (an empty `outputs`). On the sharded path every rank runs the tower (on
// other replicas' frames or a dummy frame), and a text-only replica's ranks
// get [0, hidden_i] outputs.
//
// Dedup (options.unit_keys): the mesh plan covers the distinct units of
// ALL replicas (a GRPO group spread over replicas is encoded once); a
// distinct unit's pixels leave from the replica of its first use, and its
// rows go, in the same output all-to-all, once to every rank consuming one
// of its uses (frameshard/dedup.h). The replicated path dedups within each
// replica. Gradients: the sum over uses, as below.
//
// Gradients: the output all-to-all's backward returns each gradient row to
// the rank that encoded it, summed over the cp ranks of its replica that
// received it (index_select's backward). With the usual gradient
// all-reduce of the tower's parameters over the WHOLE dp x cp mesh (SUM,
// then divide by dp), the tower's gradients equal the standard run's, where
// each replica's vision is replicated within its CP group (or CP-sharded by
// encode): both are (1/dp) sum over replicas q and cp ranks c of
// dL_{q,c}/dtheta. A rank encodes other replicas' frames, so an all-reduce
// over CP (or DP) alone is wrong for a trainable tower: it must span the
// whole mesh. encode_mesh refuses what it can see -- a mesh group whose
// size is not dp * cp -- and cannot see which group the caller reduces
// over. pixel_values get no gradient on the sharded path (their rows travel
// detached).
//
// Backward needs every rank: when any rank's output needs a gradient, every
// rank's loss must depend on its outputs -- also on zero rows, e.g. through
// masked_scatter into the embeddings, or `loss + 0 * outputs[0].sum()` --
// so that every rank runs the backward all-to-all (a rank whose own tower
// output needs none still joins: encode's fresh-leaf trick).
//
// Usage:
//   frameshard::MeshEncodeOptions o;
//   o.dp = 2;
//   o.cp = 2;
//   o.plan = frameshard::plan_options(cfg);  // plan.world is set to dp*cp
//   auto res = frameshard::encode_mesh(tower, my_replica_pixels,
//                                      my_replica_grid_thw, mesh_group, o);
//   at::Tensor embeds = res.outputs[0];  // [my replica's tokens, hidden]
//
// Collective: every rank of `mesh_group` (dp * cp ranks, replica-major)
// must call encode_mesh with the same options, a text-only replica's ranks
// too (with [0, features] pixel_values of the common dtype and a [0, 3]
// grid_thw): none may skip it. Only shapes are compared between the cp
// ranks of a replica; their pixel values must be equal too.
#pragma once

#include <frameshard/mesh_plan.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace frameshard {

struct MeshEncodeOptions {
  int64_t dp = 1;
  int64_t cp = 1;
  /// Everything but the world, which is dp * cp.
  PlanOptions plan;
  /// With plan.policy.kind auto: the per-step choice's line
  /// (MeshPlanOptions::min_gain, frameshard/mesh_plan.h).
  double min_gain = kDefaultMeshMinGain;
  /// With policy auto: this rank's predicted seconds of the rest of its
  /// step (the language model's forward and backward), finite and >= 0;
  /// each replica's slowest cp rank's becomes its other_q in the choice
  /// (MeshPlanOptions::replica_other_seconds). 0 everywhere: the choice
  /// weighs the vision alone. Ranks may differ.
  double other_seconds = 0.0;
  /// MeshPlanOptions::exchange_latency_seconds (frame_sharding.
  /// split_exchange_latency_us * 1e-6); ranks must agree.
  double exchange_latency_seconds = 0.0;
  /// This replica's CP group (cp ranks, this rank at cp rank rank % cp),
  /// or null. With it, a step whose choice is CP-only runs
  /// frameshard::encode over it -- exactly mesh_dims [cp]'s step, the
  /// replicas meeting in no collective after the metadata exchange (and a
  /// failure inside one replica's encode raising on that replica's ranks,
  /// as on the CP path). Without it, the CP-only plan runs through the
  /// mesh's routes, whose collectives join every replica. Ranks must agree
  /// on passing one.
  ProcessGroupPtr cp_group;
  /// Whether the tower has trainable parameters (has_trainable_parameters
  /// in frameshard/tower.h): then the caller's gradient all-reduce must
  /// span the whole mesh (see the banner). Ranks must agree on it.
  bool tower_trainable = true;
  /// Timeout of every collective of the call; 0: group default.
  std::chrono::milliseconds timeout{0};
  /// Owner-routed outputs: the cp rank (0 .. cp-1) consuming each of THIS
  /// replica's visual tokens (e.g. visual_token_owners of its sequence).
  /// Empty: every cp rank of the replica receives all its rows. Once one
  /// replica passes a map, every replica with visual tokens must.
  std::vector<int64_t> token_owner;
  /// Encode each distinct frame unit once in the whole mesh
  /// (frameshard/dedup.h); every rank must agree. Then unit_keys holds one
  /// content key per frame unit of THIS replica's grid_thw (frame_keys,
  /// frameshard/runtime/frame_keys.h; none for a text-only replica), equal
  /// on the cp ranks of a replica.
  bool dedup = false;
  std::vector<UnitKey> unit_keys;
};

struct MeshEncodeResult {
  /// One [tokens, hidden_i] tensor per tower output: this replica's visual
  /// tokens in their original order, or with token_owner the rows this rank
  /// owns, ascending. Empty on the replicated path for a text-only replica.
  std::vector<at::Tensor> outputs;
  /// With token_owner: this replica's token index of each output row.
  std::vector<int64_t> tokens;
  MeshPlan plan;
  /// Payload bytes this rank sent to and received from other ranks in the
  /// forward all-to-alls (0 on the replicated path): outputs and pixels.
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t pixel_bytes_sent = 0;
  int64_t pixel_bytes_received = 0;
  /// A CP-only step over cp_group: this replica's dedup (EncodeResult).
  FrameDedup dedup;
};

/// Collective; see the banner. `pixel_values` is this replica's
/// [sum(t*h*w), features]; `grid_thw` its integer [media, 3] tensor (any
/// device). Raises c10::Error "frameshard::encode_mesh: [rank r/W] ..." the
/// same on every rank for a local failure or a disagreement.
MeshEncodeResult encode_mesh(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const MeshEncodeOptions& options);

}  // namespace frameshard
