// File: frameshard/plan.h
//
// The shard plan: a value type every rank computes from the same metadata
// (grid_thw, layout, options) without communicating. It says, per rank,
// which frame units it encodes, what it feeds the tower (local grid rows,
// pixel-row ranges, cu_seqlens, dummy and floor frames) and how many output
// rows it contributes to the gather, plus the permutation that restores the
// original order when the partition is not contiguous.
//
// Dummy frames: when 0 < units < world, each empty rank encodes one minimal
// zero frame (1, merge, merge) -- merge^2 patch rows, one token -- never
// merged with real media; its output is dropped before the gather.
// Floor frames: a rank whose real patch rows are below min_local_patch_rows
// appends ceil(missing / frame_rows) zero frames at the resolution of its
// last real frame (one grid row (k, h, w)); their output is dropped before
// the gather. Dummy-only ranks are never grown. Limit: min_local_patch_rows
// is at most kMaxMinLocalPatchRows = 2^20, so floor frames stay bounded; a
// non-contiguous (lpt) plan whose gather needs restore_rows (one int64 per
// token) has at most 2^27 tokens (1 GB, about 100 video microbatches).
//
// Usage:
//   frameshard::PlanOptions o;
//   o.world = 4;
//   o.policy.enabled = true;
//   auto plan = frameshard::make_plan({{1, 64, 64}, {16, 16, 16}}, o);
//   for (const auto& r : plan.ranks) { ... r.grid, r.pixel_ranges ... }
//   o.split.enabled = true;  // may cut large frames across ranks
//
// Pure functions, thread-safe.
#pragma once

#include <frameshard/cost.h>
#include <frameshard/frames.h>
#include <frameshard/partition.h>
#include <frameshard/policy.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

/// Largest PlanOptions::min_local_patch_rows (and
/// frame_sharding.min_local_patch_rows).
constexpr int64_t kMaxMinLocalPatchRows = int64_t{1} << 20;

/// Splitting a frame across ranks (frame_sharding.split_frames; see the
/// banner of frameshard/split_plan.h for the model and what is optimal).
struct SplitOptions {
  bool enabled = false;
  /// Patch rows per window side of a window-attention tower (Qwen2.5-VL:
  /// window_size / patch_size = 8); pieces then end on window rows, so
  /// window layers need no communication. 0: full-attention tower, pieces
  /// end on merged tokens (multiples of merge^2 rows).
  int64_t window_side = 0;
  /// Cost, in the cost model's units, of one K/V row a piece receives from
  /// the other pieces of its frame (per full-attention layer, like the
  /// model's units). Default: bf16 rows, a tower at ~200 TMAC/s against
  /// ~400 GB/s of exchange bandwidth (2 bytes x 2e14 / 4e11 = 1000).
  double exchange_row_cost = 1000.0;
  /// Cut frames only when that lowers the modelled bottleneck by at least
  /// this fraction of the unsplit optimum, in [0, 1). Every full-attention
  /// layer of a split plan adds one synchronising K/V exchange whose fixed
  /// latency the row costs above leave out: measured on transformers
  /// Qwen3-VL (README, "Split frames in Python"), cuts that bought 0.3 % and
  /// 1.2 % on the model made the step 1.34x and 1.42x slower. 0: any strict
  /// gain (up to a relative 1e-9).
  double min_gain = 0.05;
  /// Cost, in the cost model's units, that a split plan adds on every rank
  /// per step whatever its rows: the fixed latency of its K/V exchanges (one
  /// per full-attention layer, forward and backward). A split is taken only
  /// when its bottleneck plus this still gains min_gain, and the split
  /// plan's rank costs include it. The config sets it from
  /// split_exchange_latency_us; 0 here (a bare PlanOptions).
  double exchange_fixed_cost = 0.0;
};

struct PlanOptions {
  int64_t world = 1;  // cp_size: ranks the frames are spread over
  Partitioner partitioner = Partitioner::kOptimal;
  CostModel cost = flop_cost_model(tower_preset("qwen3-vl"));
  int64_t min_local_patch_rows = 96;  // 0 turns floor padding off
  MediaLayout layout;
  PolicyOptions policy;
  SplitOptions split;
};

enum class PlanPath { kSharded, kReplicated };
std::string to_string(PlanPath p);

/// Half-open row range [begin, end).
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const {
    return end - begin;
  }
  bool operator==(const RowRange& o) const {
    return begin == o.begin && end == o.end;
  }
};

/// Floor frames and dummy frames appended to a rank's real frames.
/// ceil(missing / frame_rows), 0 when local_rows >= floor, floor == 0 or
/// frame_rows == 0. (4, 4, 96) -> 23; (8, 4, 96) -> 22; (92, 4, 96) -> 1.
int64_t floor_pad_frames(
    int64_t local_patch_rows, int64_t frame_rows, int64_t min_local_patch_rows);

struct RankShard {
  int64_t rank = 0;
  /// Indices into ShardPlan::frames.units, ascending.
  std::vector<int64_t> units;
  /// Local grid rows fed to the tower: real frames (consecutive units of one
  /// media item merged into one (count, h, w) row), then the floor row
  /// (pad_frames, h, w) if any, then the dummy row (1, merge, merge) if any.
  std::vector<GridThw> grid;
  /// Rows of the global pixel_values holding the real frames, in local
  /// order; adjacent ranges are merged.
  std::vector<RowRange> pixel_ranges;
  /// Per-frame cumulative patch rows over all local frames (real, floor,
  /// dummy): frames.size() + 1 entries starting at 0.
  std::vector<int64_t> cu_seqlens;
  int64_t real_patch_rows = 0;   // rows of real frames
  int64_t real_tokens = 0;       // output rows kept and gathered
  int64_t pad_frames = 0;        // floor frames appended
  int64_t dummy_frames = 0;      // 0 or 1
  int64_t local_patch_rows = 0;  // rows fed to the tower (real+pad+dummy)
  int64_t local_tokens = 0;      // rows the tower returns (real+pad+dummy)
  double cost = 0.0;             // cost of the real frames
  /// Split plans: the local frames this rank holds only part of (at most
  /// the first and the last; FramePiece::frame indexes the local real
  /// frames, i.e. `units`). Such a frame has its own grid row (1, h, w),
  /// its pixel_ranges and cu_seqlens segment cover the piece's rows only,
  /// and real_patch_rows / real_tokens count the piece. Empty otherwise.
  std::vector<FramePiece> pieces;
  /// K/V rows this rank receives per full-attention layer from the other
  /// pieces of its split frames (sum over pieces of frame rows - piece rows).
  int64_t exchange_rows = 0;
};

struct ShardPlan {
  PlanPath path = PlanPath::kReplicated;
  std::string reason;
  PlanOptions options;
  FrameSet frames;
  std::vector<double> unit_costs;
  /// The partition for options.world, computed even on the replicated path
  /// (reports show what sharding would have done).
  Partition partition;
  std::vector<RankShard> ranks;
  /// Output rows each rank contributes to the gather (its real tokens), in
  /// rank order; sums to frames.total_tokens.
  std::vector<int64_t> gather_counts;
  /// Empty when the gathered rows are already in the original order
  /// (contiguous partitions). Otherwise output row i = gathered row
  /// restore_rows[i] (size frames.total_tokens).
  std::vector<int64_t> restore_rows;
  /// Split plans (options.split.enabled and some frame cut across ranks):
  /// true, and `partition` holds the split-aware rank costs (rank_costs,
  /// max_cost, imbalance); partition.cuts[r] is the first unit rank r
  /// touches and partition.assignment the rank holding each unit's first
  /// row. unsplit_max_cost is the optimal max rank cost without splitting.
  bool split = false;
  /// Also set (to partition.max_cost()) in unsplit plans of the optimal
  /// partitioner; 0 for the other partitioners.
  double unsplit_max_cost = 0.0;
  /// 64-bit fingerprint over everything the ranks must agree on (path,
  /// world, layout, units, assignment, per-rank grids, pieces, pads,
  /// dummies, gather counts).
  uint64_t fingerprint = 0;

  bool sharded() const {
    return path == PlanPath::kSharded;
  }
};

/// Expands `grid`, costs the units, decides the path and partitions. With
/// options.split.enabled (partitioner optimal only, else frameshard::Error)
/// the sharded path may cut frames into pieces (frameshard/split_plan.h);
/// when that does not strictly lower the bottleneck the plan is exactly the
/// unsplit one.
ShardPlan make_plan(const std::vector<GridThw>& grid, const PlanOptions& opts);

/// A plan whose ranks come in equal blocks: the units [unit_blocks[b],
/// unit_blocks[b + 1]) go to ranks [b * k, (b + 1) * k), k = options.world /
/// blocks, each block partitioned on its own with the options' partitioner,
/// cost model and split rule -- a dp x cp mesh's CP-only plan, each replica's
/// frames over its own cp ranks (frameshard/mesh_plan.h). Always the sharded
/// path, with `reason`; a rank without units encodes a dummy frame.
/// frameshard::Error when world is not a multiple of the blocks, or the
/// offsets do not run from 0 to the unit count, non-decreasing, along media
/// (grid row) boundaries.
ShardPlan make_blocked_plan(
    const std::vector<GridThw>& grid,
    const PlanOptions& opts,
    const std::vector<int64_t>& unit_blocks,
    const std::string& reason);

/// The fingerprint of `plan`'s current fields (what make_plan stores in
/// plan.fingerprint), e.g. to check that a plan was not altered.
uint64_t recompute_fingerprint(const ShardPlan& plan);

/// A fingerprint as the tools print it: "0x" and 16 hex digits.
std::string fingerprint_hex(uint64_t fingerprint);

}  // namespace frameshard
