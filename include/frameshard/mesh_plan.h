// File: frameshard/mesh_plan.h
//
// Planning over the data x context-parallel mesh
// (frame_sharding.mesh_dims [dp, cp]). Within a CP group every rank holds
// the same microbatch; across the dp replicas the microbatches differ (one
// draws three large document pages, its neighbour only text), and every
// step waits for the replica with the most vision work: no CP-only plan
// helps. A mesh plan pools the frame units of every replica -- replica-major,
// then frame order -- and partitions them over all dp * cp ranks with the
// same partitioners, cost models, thresholds, dummy and floor frames and
// split frames as a CP plan: it *is* make_plan over the pooled grid with
// world dp * cp (frameshard/plan.h), so `optimal` is the exact minimum
// bottleneck over contiguous blocks of the replica-major order and `lpt` a
// permuted assignment with its restore order.
//
// Mesh rank m = replica * cp + cp_rank (dp outermost, the runtime's
// mesh_group_ranks order).
//
// Who needs what:
//   pixels   replica q's pixel rows live on each of its cp ranks; a unit of
//            q encoded on mesh rank d is sent by q's cp rank d % cp, so each
//            of q's ranks sends about 1/cp of what leaves q
//            (mesh_pixel_route);
//   outputs  replica q's outputs are the gathered rows
//            [replica_tokens[q], replica_tokens[q + 1]) of the pooled
//            order; every cp rank of q receives all of them, or, with owner
//            routing, only the rank whose sequence chunk holds the token
//            (mesh_output_route).
// A replica without media (text only) adds no units; its ranks still
// encode other replicas' frames (or a dummy frame) and take part in every
// exchange, so no rank skips a collective.
//
// Usage:
//   frameshard::MeshPlanOptions o;
//   o.dp = 2;
//   o.cp = 2;
//   o.plan.policy.enabled = true;
//   auto mp = frameshard::make_mesh_plan({{{1, 64, 64}}, {}}, o);
//   mp.plan.ranks[3].units;                  // what mesh rank 3 encodes
//   auto px = frameshard::mesh_pixel_route(mp, 3);
//   auto out = frameshard::mesh_output_route(mp, 3);
//
// The per-step choice (policy auto): pooling pays only when the replicas'
// vision work differs by more than the extra traffic costs -- on batches
// of similar size the outputs' trip over the mesh can cost more than the
// straggler gap it removes. With options.plan.policy.kind auto, a sharded
// mesh plan is weighed against the CP-only plan (make_blocked_plan: each
// replica's units over its own cp ranks, as mesh_dims [cp] would run them)
// on one model for both:
//
//   vision    = slowest rank's tower cost * seconds_per_unit
//             + slowest rank's received bytes / gather_bandwidth_gbps
//             + exchanges * exchange_latency_seconds
//   received  = pixel rows from other ranks * pixel_row_bytes
//             + output rows from other ranks * gather_row_bytes
//   mesh      = vision(mesh plan) + max over replicas of other_q
//   cp-only   = max over replicas q of (vision of q's ranks + other_q)
//
// (every cp rank of a replica counted as receiving all its rows: owner
// routing lowers both plans' traffic). exchanges counts the collectives a
// plan's routes add, each forward and backward: 2 for the pooled plan
// (pixels, outputs), 1 for the CP-only plan at cp > 1 (its gather), 0 at
// cp 1; exchange_latency_seconds is frame_sharding.split_exchange_latency_us
// (frameshard.calibrate_exchange measures it), which on a small step over
// Gloo outweighs the bytes. other_q (replica_other_seconds) is
// the rest of replica q's step -- the language model's forward and
// backward, which the trainer predicts from its sequence length: the mesh
// joins every replica in its collectives before and after that work, so a
// replica whose vision is light but whose text is long can make the pooled
// step slower than each replica running its own (measured on `mixed`,
// docs/performance.md). Without it (empty, or zeros) the terms vanish and
// the choice weighs the vision alone. The step takes the mesh only when it
// gains at least min_gain of the CP-only prediction; otherwise MeshPlan::
// mode is kCpOnly and `plan` is the CP-only plan, which the same routes run
// (pixels then never leave their replica). The threshold policy always
// pools, as before. Every rank reaches the same choice from the same grids.
//
// Pure functions over value types, thread-safe: every rank computes the same
// plan and routes from the replicas' grids without communicating (the
// runtime exchanges the grids first).
#pragma once

#include <frameshard/dedup.h>
#include <frameshard/owner_route.h>
#include <frameshard/plan.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

/// Largest dp of a mesh plan (replicas).
constexpr int64_t kMaxMeshReplicas = int64_t{1} << 16;

/// Default frame_sharding.mesh_min_gain: the share of the CP-only plan's
/// predicted vision time the mesh must save before a step pools.
constexpr double kDefaultMeshMinGain = 0.05;
/// Default pixel row of the route model: Qwen-VL's 3 x 2 x 16 x 16 patch
/// values in bf16 (the runtime passes the real one).
constexpr int64_t kDefaultPixelRowBytes = 1536 * 2;

struct MeshPlanOptions {
  int64_t dp = 1;
  int64_t cp = 1;
  /// Everything but the world, which is dp * cp.
  PlanOptions plan;
  /// Policy auto: the mesh only when it saves at least this share of the
  /// CP-only prediction, in [0, 1).
  double min_gain = kDefaultMeshMinGain;
  /// Bytes of one pixel row (features * element size) in the route model.
  int64_t pixel_row_bytes = kDefaultPixelRowBytes;
  /// Empty, or per replica the predicted seconds of the rest of its step
  /// (finite, >= 0; see the banner).
  std::vector<double> replica_other_seconds;
  /// Seconds of one exchange, forward and backward (finite, >= 0).
  double exchange_latency_seconds = 0.0;
};

/// Which plan a mesh step runs: every replica's frames pooled over all
/// dp * cp ranks, or each replica's over its own cp ranks.
enum class MeshMode { kMesh, kCpOnly };
/// "mesh" / "cp-only".
std::string to_string(MeshMode mode);

/// A plan's predicted vision time on the model of the banner, in seconds.
struct MeshEstimate {
  double compute_seconds = 0.0;  // the slowest rank's tower
  double route_seconds = 0.0;    // the slowest rank's received bytes
  /// The rest of the step on the critical path: the longest replica's
  /// (mesh), or the critical replica's (CP-only, whose terms are all that
  /// replica's); 0 without replica_other_seconds.
  double other_seconds = 0.0;
  int64_t route_bytes = 0;  // the slowest rank's received bytes
  /// The most rows (pixel and output) one rank receives from others: 0
  /// when the plan's routes are all rank-local (CP-only at cp 1).
  int64_t rows_in = 0;
  double total() const {
    return compute_seconds + route_seconds + other_seconds;
  }
};

/// What the per-step choice weighed.
struct MeshChoice {
  /// Both plans predicted (policy auto, a sharded mesh plan, dp > 1).
  bool weighed = false;
  MeshEstimate mesh;
  MeshEstimate cp_only;
  /// One line: "mesh: 1.2 ms against cp-only 3.4 ms (gain 0.65 >= 0.05)".
  std::string reason;
  /// 1 - mesh / cp-only (0 when not weighed).
  double gain() const {
    return weighed && cp_only.total() > 0.0
               ? 1.0 - mesh.total() / cp_only.total()
               : 0.0;
  }
};

struct MeshPlan {
  int64_t dp = 1;
  int64_t cp = 1;
  /// Over the pooled grid (replica 0's media, then replica 1's, ...),
  /// world dp * cp. With no media on any replica: the replicated path,
  /// reason "no media on any replica", no units and no ranks' work (the
  /// one plan expand_frames cannot describe).
  ShardPlan plan;
  /// dp + 1 offsets: replica q's media are plan.frames.grid rows
  /// [replica_media[q], replica_media[q + 1]); likewise its frame units,
  /// its pooled pixel rows and its gathered output rows.
  std::vector<int64_t> replica_media;
  std::vector<int64_t> replica_units;
  std::vector<int64_t> replica_patch_rows;
  std::vector<int64_t> replica_tokens;
  /// With replica keys (dedup): the pooled units' distinct units, over the
  /// WHOLE mesh (a frame in two replicas is encoded once); plan covers
  /// dedup.grid. The replica_* offsets above count uses (the pooled
  /// original grid); a distinct unit's pixels come from the replica of its
  /// first use. Identity (no keys or no repeats): plan is exactly the
  /// plan without dedup. After encode_mesh's replicated path, where each
  /// replica encodes its own distinct frames, the distinct_* counts are
  /// those summed over the replicas (what the towers encoded, once per
  /// replica).
  FrameDedup dedup;
  /// kCpOnly: `plan` is the CP-only plan (see the banner).
  MeshMode mode = MeshMode::kMesh;
  MeshChoice choice;

  bool empty() const {
    return replica_units.empty() || replica_units.back() == 0;
  }
  /// The replica mesh rank `rank` belongs to.
  int64_t replica_of_rank(int64_t rank) const {
    return rank / cp;
  }
  /// The replica a pooled token row (or unit, or pixel row) belongs to.
  int64_t replica_of_token(int64_t token) const;
  int64_t replica_of_unit(int64_t unit) const;
  int64_t replica_of_patch_row(int64_t row) const;
};

/// Pools `replicas` (one grid per replica, dp of them; an empty grid is a
/// replica without media) and plans over dp * cp ranks. frameshard::Error
/// for dp or cp outside [1, kMaxMeshReplicas], replicas.size() != dp, a bad
/// grid (naming its replica) or options make_plan refuses. `replica_keys`
/// (empty, or one key per frame unit of each replica): plan over the
/// mesh's distinct units (frameshard/dedup.h). With policy auto, the
/// per-step choice of the banner (mode, choice); min_gain outside [0, 1), a
/// negative pixel_row_bytes or replica_other_seconds of the wrong size or
/// not finite and >= 0 is a frameshard::Error.
MeshPlan make_mesh_plan(
    const std::vector<std::vector<GridThw>>& replicas,
    const MeshPlanOptions& options,
    const std::vector<std::vector<UnitKey>>& replica_keys = {});

/// The plan's predicted step time (banner) under `options` (policy,
/// bandwidth, row widths, other seconds): the mesh formula, or with
/// plan.mode kCpOnly the CP-only one; estimate_mesh_plan(mp, o).total() is
/// what the choice compares.
MeshEstimate estimate_mesh_plan(
    const MeshPlan& plan, const MeshPlanOptions& options);

/// The pixel rows mesh rank `rank` sends and receives.
struct MeshPixelRoute {
  /// Rows of this rank's own replica's pixel_values (replica-local
  /// indices, half-open ranges), grouped by destination rank in ascending
  /// order and within one destination in that rank's local order.
  std::vector<RowRange> send_ranges;
  std::vector<int64_t> send_counts;  // rows per destination rank
  std::vector<int64_t> recv_counts;  // rows per source rank
  /// Received rows, concatenated in source-rank order, are exactly this
  /// rank's local real pixel rows in local order (its units ascending, and
  /// a source of an earlier replica has a lower rank): no reordering.
};

/// See MeshPixelRoute. Empty counts (all zero) on the replicated path.
MeshPixelRoute mesh_pixel_route(const MeshPlan& plan, int64_t rank);

/// The outputs mesh rank `rank` sends (its real encoded rows) and receives
/// (its replica's rows), as an OwnerRoute (frameshard/owner_route.h) whose
/// send_order lists a local row once per destination: with `owners` empty
/// every cp rank of the row's replica receives it; otherwise owners[q] has
/// one entry per token of replica q, the cp rank (0 .. cp-1) that consumes
/// it. `tokens` are the received rows' pooled token indices, ascending.
/// With dedup a distinct row goes once to every rank consuming one of its
/// uses, and recv_order expands it to those uses (route_uses, dedup.h).
/// frameshard::Error on the replicated path, for owners of the wrong shape
/// or a cp rank out of range.
OwnerRoute mesh_output_route(
    const MeshPlan& plan,
    int64_t rank,
    const std::vector<std::vector<int64_t>>& owners = {});

}  // namespace frameshard
