// File: frameshard/dedup.h
//
// Encode each distinct frame once (frame_sharding.dedup). In GRPO-style
// training every prompt is sampled G times and each sample carries the
// prompt's images, so a microbatch (or the dp x cp mesh) holds the same
// pixels many times. Every frame unit (frames.h) gets a 128-bit content key
// (runtime/frame_keys.h hashes its pixel rows, dtype and shape; a caller may
// pass media ids instead, media_unit_keys); units with equal keys are one
// *distinct* unit. The plan is make_plan over the distinct units only, and
// each use of a unit receives its distinct unit's output rows.
//
//   dedup_frames   the distinct units of a grid, in first-use order:
//                  consecutive distinct frames of one media item form one
//                  grid row (so without repeats the grid, the plan and the
//                  outputs are exactly those of dedup off), the rows of
//                  pixel_values that feed them, and, per use token, the
//                  distinct token it copies;
//   route_uses     the all-to-all of a sharded plan over distinct units
//                  whose rows go to every rank that consumes one of their
//                  uses: each row is sent once per consuming rank, and the
//                  receiver expands it to its uses (owner routing and the
//                  dp x cp mesh with dedup).
//
// Semantics (runtime/encode.h, mesh_encode.h): use token u's output is the
// distinct output row token_source[u]; the backward of that copy
// (index_select) SUMS the gradients of all uses of a row before the
// tower's backward. By linearity that is exact: the tower's parameter
// gradient equals the sum over the uses of the replicated run's. It
// assumes a deterministic tower: with dropout (or any stochastic layer) in
// training, the replicated run draws a different mask per use and dedup one
// per distinct frame. The Qwen2-VL / 2.5-VL / 3-VL, GLM-4V and RADIO towers
// have no dropout in their vision blocks (attention dropout 0, none in the
// MLPs or the merger), so they are deterministic up to kernel order.
//
// Keys: a collision of two different units of the same shape would copy
// one's output to the other. frame_keys is a 128-bit hash (two independent
// 64-bit lanes): with n distinct frames in a step the chance of any
// collision is about n^2 / 2^129, below 1e-30 for a million frames; equal
// keys with different shapes raise here.
//
// Usage:
//   auto d = frameshard::dedup_frames(grid, keys, layout);  // keys per unit
//   auto plan = frameshard::make_plan(d.grid, options);      // distinct only
//   // tower input: rows d.pixel_rows of pixel_values, in order;
//   // output of use token u = distinct output row d.token_source[u]
//
// Pure functions over value types, thread-safe.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/owner_route.h>
#include <frameshard/plan.h>

#include <cstdint>
#include <vector>

namespace frameshard {

/// A frame unit's 128-bit content key.
struct UnitKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const UnitKey& o) const {
    return hi == o.hi && lo == o.lo;
  }
  bool operator!=(const UnitKey& o) const {
    return !(*this == o);
  }
};

struct FrameDedup {
  /// The distinct units' grid, first-use order; consecutive distinct frames
  /// of one media item share a row.
  std::vector<GridThw> grid;
  /// Rows of the original pixel_values that, concatenated, are the distinct
  /// grid's pixel rows (adjacent ranges merged).
  std::vector<RowRange> pixel_rows;
  /// Per use unit (expand_frames(original grid).units): its distinct unit.
  std::vector<int64_t> unit_source;
  /// Per distinct unit: the use unit it was first seen as, and that unit's
  /// first row of the original pixel_values.
  std::vector<int64_t> first_use;
  std::vector<int64_t> source_pixel_offset;
  /// Per use token: the distinct token (row of the distinct outputs) it
  /// copies. Empty when there are no repeats (identity()).
  std::vector<int64_t> token_source;
  int64_t units = 0;
  int64_t distinct_units = 0;
  int64_t patch_rows = 0;
  int64_t distinct_patch_rows = 0;
  int64_t tokens = 0;
  int64_t distinct_tokens = 0;
  /// Over the unit -> distinct unit map: ranks that disagree on keys
  /// disagree here (the runtime mixes it into the consensus).
  uint64_t fingerprint = 0;

  /// No repeats: grid, pixel rows and tokens are the original ones.
  bool identity() const {
    return distinct_units == units;
  }
  /// The distinct token use token `u` copies.
  int64_t source_token(int64_t u) const {
    return token_source.empty() ? u : token_source[static_cast<size_t>(u)];
  }
};

/// The rows of the original pixel_values that hold the distinct grid's
/// pixel rows [range.begin, range.end), in order (split where consecutive
/// distinct units come from rows that are not adjacent). `distinct` is
/// expand_frames(dedup.grid): its units are the distinct units.
std::vector<RowRange> source_rows(
    const FrameDedup& dedup, const FrameSet& distinct, const RowRange& range);

/// See the banner. `unit_keys` has one key per frame unit of `grid`
/// (expand_frames order). frameshard::Error for a bad grid, the wrong number
/// of keys, or equal keys on units of different shapes (naming both).
FrameDedup dedup_frames(
    const std::vector<GridThw>& grid,
    const std::vector<UnitKey>& unit_keys,
    const MediaLayout& layout = {});

/// Per frame unit keys from one key per media item (a data set's image
/// hash or id): frame f of media m gets a key mixed from m's key and f, so
/// two items with one id share every frame and frames of one video do not.
/// frameshard::Error unless media_keys has one key per grid row.
std::vector<UnitKey> media_unit_keys(
    const std::vector<GridThw>& grid,
    const std::vector<UnitKey>& media_keys,
    const MediaLayout& layout = {});

/// The ranks that consume each use token: [first[u], last[u]) (one rank
/// with owner routing, every rank of a replica without), and the distinct
/// token each use copies (FrameDedup::source_token).
struct UseConsumers {
  std::vector<int64_t> source;
  std::vector<int64_t> first;
  std::vector<int64_t> last;
};

/// The all-to-all of rank `rank` for a sharded `plan` over distinct units:
/// send_order lists each encoded row once per rank that consumes any of its
/// uses; recv_order expands the received rows (source-rank order) to this
/// rank's use tokens, ascending (a row may appear several times); tokens
/// are those use tokens. frameshard::Error on the replicated path or for
/// consumers of the wrong size or out of [0, world).
OwnerRoute route_uses(
    const ShardPlan& plan, const UseConsumers& uses, int64_t rank);

}  // namespace frameshard
