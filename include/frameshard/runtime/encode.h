// File: frameshard/runtime/encode.h
//
// Sharded encode: run the vision tower (and its projector/merger) once per
// rank on that rank's frames only, then gather every output back in the
// original order. Callers never branch: when the policy says replicated,
// sharding is disabled, or cp_size == 1, the same call runs the tower on
// everything and returns its outputs.
//
// Steps (all ranks, same metadata => same plan, no communication to plan):
//   1. plan from grid_thw (frameshard::make_plan);
//   2. slice the local pixel rows, append floor and dummy zero frames;
//   3. run the tower on (local pixel rows, local grid_thw, local cu_seqlens);
//   4. check each output's row count against the plan; drop floor and dummy
//      rows BEFORE any collective;
//   5. consensus: exchange plan fingerprint, local row counts, dtype, feature
//      widths, requires-grad and any local error; a disagreement or a failure
//      on any rank raises the same error on every rank (no hang);
//   6. gather all outputs in ONE collective, fused along the feature dim,
//      restore the original order (lpt), split back into the outputs; or,
//      with token_owner, send each row only to the rank that owns it (ONE
//      all-to-all, frameshard/runtime/route.h).
//
// Dedup (options.unit_keys, frame_sharding.dedup; frameshard/dedup.h): the
// plan covers the distinct frame units only, the tower sees each distinct
// unit's rows once in the whole group, and every use of a unit receives its
// rows: after the all-gather by a local index_select, with token_owner in
// the same one all-to-all (a row goes once to each rank owning one of its
// uses). The backward sums the gradients of all uses of a row before the
// tower's backward: exact for a deterministic tower (dedup.h says why the
// Qwen, GLM-4V and RADIO towers are; a tower with dropout in training draws
// one mask per distinct frame instead of one per use). Without repeats the
// plan and outputs are exactly those of dedup off. The keys join the plan
// fingerprint of the consensus: ranks with different keys raise the same
// error.
//
// The tower is a frameshard::VisionTower (frameshard/tower.h): anything
// callable on a TowerInput returning one or more [rows, hidden_i] tensors of
// one dtype (e.g. embeddings and DeepStack features); rows are merged tokens
// (local_tokens of the plan).
//
// Gradient scope: the gather's backward sums gradients over the group. A
// trainable tower sharded over a group wider than CP (e.g. CP x TP, where the
// tower is replicated) would count its gradients several times: encode
// raises unless the tower is frozen (group_spans_only_cp = false requires
// tower_trainable = false).
//
// EncodeOptions and EncodeResult are encode_mesh's too
// (frameshard/runtime/mesh_encode.h), which alone reads EncodeOptions::mesh
// and sets EncodeResult::mesh and pixel_bytes_*.
//
// Usage:
//   frameshard::EncodeOptions o;
//   o.plan = frameshard::plan_options(cfg);  // o.plan.world == cp_size
//   auto res = frameshard::encode(
//       [&](const frameshard::TowerInput& in) {
//         return std::vector<at::Tensor>{tower->forward(in)};
//       },
//       pixel_values, grid_thw, cp_group, o);
//   at::Tensor embeds = res.outputs[0];  // [total_tokens, hidden]
//
// Collective: every rank of `group` must call encode with the same grid_thw
// and options.
#pragma once

#include <frameshard/dedup.h>
#include <frameshard/mesh_plan.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/gather.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace frameshard {

/// encode_mesh only (encode ignores them): the data x context-parallel
/// mesh and its per-step choice (frameshard/runtime/mesh_encode.h).
struct MeshOptions {
  int64_t dp = 1;
  int64_t cp = 1;
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
  /// Encode each distinct frame unit once in the whole mesh
  /// (frameshard/dedup.h); every rank must agree. Then unit_keys holds one
  /// content key per frame unit of THIS replica's grid_thw (none for a
  /// text-only replica, hence the flag), equal on the cp ranks of a
  /// replica.
  bool dedup = false;
};

/// The options of encode and encode_mesh.
struct EncodeOptions {
  /// plan.world is cp_size and must equal the group's size (encode_mesh:
  /// everything but the world, which is dp * cp).
  PlanOptions plan;
  /// False when the group is wider than CP (e.g. CP x TP); allowed only for
  /// a frozen tower. encode only.
  bool group_spans_only_cp = true;
  /// Whether the tower has trainable parameters (has_trainable_parameters in
  /// frameshard/tower.h). encode_mesh: then the caller's gradient
  /// all-reduce must span the whole mesh; ranks must agree on it.
  bool tower_trainable = true;
  /// Timeout of every collective of the call; 0: group default.
  std::chrono::milliseconds timeout{0};
  /// Owner-routed outputs (frameshard/owner_route.h): the rank of `group`
  /// that consumes each visual token (plan.frames.total_tokens entries,
  /// e.g. visual_token_owners). Empty: every rank receives every row (the
  /// all-gather). Set: each rank returns only the rows it owns, in
  /// ascending token order, moved by one all-to-all on the sharded path
  /// (selected locally on the replicated one). encode_mesh: the cp rank
  /// (0 .. cp-1) consuming each of THIS replica's visual tokens; once one
  /// replica passes a map, every replica with visual tokens must.
  std::vector<int64_t> token_owner;
  /// One content key per frame unit of grid_thw (frame_keys in
  /// frameshard/runtime/frame_keys.h, or media_unit_keys): encode each
  /// distinct unit once. Empty: no dedup (encode_mesh: mesh.dedup says).
  /// Ranks must pass equal keys.
  std::vector<UnitKey> unit_keys;
  /// The K/V exchanges the tower makes per call when the plan cuts frames
  /// (one per full-attention layer), if it declares them; ranks must agree.
  /// Then only the first exchange runs a consensus; a rank whose tower
  /// fails after k >= 1 exchanges (or makes fewer) sends zeros through the
  /// other tower_exchanges - k, and every rank raises the same error at
  /// encode's own consensus; a tower making more raises on the extra one.
  /// 0: not declared, every exchange runs a consensus. encode only
  /// (encode_mesh's exchanges always run theirs).
  int64_t tower_exchanges = 0;
  MeshOptions mesh;
};

/// The result of encode and encode_mesh.
struct EncodeResult {
  /// One [total_tokens, hidden_i] tensor per tower output, original order;
  /// with token_owner, [owned tokens, hidden_i] in ascending token order.
  /// encode_mesh: this replica's visual tokens; empty on the replicated
  /// path for a text-only replica.
  std::vector<at::Tensor> outputs;
  /// With token_owner: the global token index of each output row
  /// (encode_mesh: this replica's token index).
  std::vector<int64_t> tokens;
  /// The plan that ran (encode_mesh: mesh.plan, world dp * cp).
  ShardPlan plan;
  /// Payload bytes this rank sent and received in the forward collectives
  /// (0 on the replicated path; encode_mesh: outputs and pixels), and what
  /// an all-gather would have made it receive (encode only; equal to
  /// bytes_received without token_owner).
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t allgather_bytes_received = 0;
  /// With unit_keys: the distinct units (plan covers dedup.grid); otherwise
  /// units == distinct_units == 0. encode_mesh: set by a CP-only step over
  /// mesh.cp_group (the mesh's own is mesh.dedup).
  FrameDedup dedup;
  /// encode_mesh only: the mesh plan (mode, choice, replica offsets), and
  /// the pixel part of bytes_sent and bytes_received.
  MeshPlan mesh;
  int64_t pixel_bytes_sent = 0;
  int64_t pixel_bytes_received = 0;
};

/// What rank `rank` of a sharded `plan` feeds its tower (step 2): its real
/// frames' rows of `pixel_values`, then zero floor and dummy frames, with
/// their local grid_thw and cu_seqlens. Not collective (a simulation or a
/// benchmark can run every rank's share in one process).
TowerInput local_tower_input(
    const ShardPlan& plan, int64_t rank, const at::Tensor& pixel_values);

/// Collective; see the banner. `pixel_values` is [sum(t*h*w), features];
/// `grid_thw` is an integer [media, 3] tensor (any device).
EncodeResult encode(
    const VisionTower& tower,
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const EncodeOptions& options);

}  // namespace frameshard
