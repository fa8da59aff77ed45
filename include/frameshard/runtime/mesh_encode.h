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
// Dedup (options.mesh.dedup, unit_keys): the mesh plan covers the distinct
// units of ALL replicas (a GRPO group spread over replicas is encoded once);
// a distinct unit's pixels leave from the replica of its first use, and its
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
//   frameshard::EncodeOptions o;  // encode's, with its mesh fields
//   o.mesh.dp = 2;
//   o.mesh.cp = 2;
//   o.plan = frameshard::plan_options(cfg);  // plan.world is set to dp*cp
//   auto res = frameshard::encode_mesh(tower, my_replica_pixels,
//                                      my_replica_grid_thw, mesh_group, o);
//   at::Tensor embeds = res.outputs[0];  // [my replica's tokens, hidden]
//   // res.mesh: the mesh plan (mode, choice); res.plan == res.mesh.plan
//
// Collective: every rank of `mesh_group` (dp * cp ranks, replica-major)
// must call encode_mesh with the same options, a text-only replica's ranks
// too (with [0, features] pixel_values of the common dtype and a [0, 3]
// grid_thw): none may skip it. Only shapes are compared between the cp
// ranks of a replica; their pixel values must be equal too.
#pragma once

#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>

namespace frameshard {

/// Collective; see the banner. `pixel_values` is this replica's
/// [sum(t*h*w), features]; `grid_thw` its integer [media, 3] tensor (any
/// device). Raises c10::Error "frameshard::encode_mesh: [rank r/W] ..." the
/// same on every rank for a local failure or a disagreement.
EncodeResult encode_mesh(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const EncodeOptions& options);

}  // namespace frameshard
