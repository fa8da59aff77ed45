// File: frameshard/frames.h
//
// The frame model. Media arrive as Qwen-VL `grid_thw` rows (t, h, w) counted
// in patches; `pixel_values` holds sum(t*h*w) packed patch rows, each one
// temporal patch (C * temporal_patch_size * patch * patch features). Each row
// expands into `t` frame units of h*w patch rows and h*w/merge^2 merged
// tokens. Vision towers of the Qwen-VL family attend strictly inside a frame,
// so frame units are independent and can be encoded on different ranks.
//
// Usage:
//   frameshard::FrameSet fs = frameshard::expand_frames(
//       {{1, 32, 32}, {8, 16, 24}}, frameshard::MediaLayout{});
//   // fs.units.size() == 9; fs.units[1].pixel_offset == 1024
//
// Limits: layout.spatial_merge_size is at most 2^20 (Qwen-VL uses 2; its
// square, the rows of a dummy frame, stays inside int64). A batch expands
// into at most kMaxFrameUnits (2^20) frame units,
// sum(t) over grid_thw; expand_frames refuses more before allocating (each
// unit is 64 bytes and the plan keeps a few vectors per unit, so 2^20 is
// about 0.3 GB, far above any real microbatch).
//
// Pure functions, no communication, thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace frameshard {

/// Most frame units (sum of grid_thw t) one batch may expand into.
constexpr int64_t kMaxFrameUnits = int64_t{1} << 20;

/// One `grid_thw` row: temporal patches, patch rows, patch columns.
struct GridThw {
  int64_t t = 1;
  int64_t h = 0;
  int64_t w = 0;
  int64_t patches() const {
    return t * h * w;
  }
  bool operator==(const GridThw& o) const {
    return t == o.t && h == o.h && w == o.w;
  }
  bool operator!=(const GridThw& o) const {
    return !(*this == o);
  }
};

/// Geometry shared by all media of a batch (Qwen-VL defaults).
struct MediaLayout {
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
};

/// One temporal patch row of one media item: the unit of work frameshard
/// assigns to a rank.
struct FrameUnit {
  int64_t media = 0;         // index of the grid_thw row it comes from
  int64_t frame = 0;         // temporal index inside that media item
  int64_t h = 0;             // patch rows of the frame
  int64_t w = 0;             // patch columns of the frame
  int64_t patch_rows = 0;    // h * w: rows of pixel_values it covers
  int64_t tokens = 0;        // h * w / merge^2: output rows it produces
  int64_t pixel_offset = 0;  // first row in the packed pixel_values
  int64_t token_offset = 0;  // first row in the full (replicated) output
};

/// Rows [begin, end) of one frame's h*w patch rows, in the processor's row
/// order (merge x merge windows row-major): the part of a frame a rank holds
/// when the plan splits the frame across ranks (split_frames). begin and end
/// are multiples of merge^2, so a piece holds whole merged tokens: tokens
/// [begin / merge^2, end / merge^2) of the frame. `frame` is the local frame
/// (cu_seqlens segment) the piece is, among the frames a rank feeds its tower.
struct FramePiece {
  int64_t frame = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t rows() const {
    return end - begin;
  }
  bool operator==(const FramePiece& o) const {
    return frame == o.frame && begin == o.begin && end == o.end;
  }
};

/// All frame units of a batch, in the original order.
struct FrameSet {
  MediaLayout layout;
  std::vector<GridThw> grid;
  std::vector<FrameUnit> units;
  int64_t total_patch_rows = 0;
  int64_t total_tokens = 0;
};

/// Validates `grid` (t, h, w > 0; h and w divisible by spatial_merge_size;
/// layout sizes > 0) and expands it into frame units. An empty grid gives an
/// empty FrameSet (the policy then takes the replicated path). Throws
/// frameshard::Error naming the row and field otherwise.
FrameSet expand_frames(
    const std::vector<GridThw>& grid, const MediaLayout& layout = {});

/// Checks that `pixel_rows` (the row count of pixel_values) equals
/// sum(t*h*w) of the frame set; throws frameshard::Error otherwise.
void check_pixel_rows(const FrameSet& frames, int64_t pixel_rows);

/// Per-frame cumulative patch rows of `grid`: frames + 1 entries from 0 (a
/// row of t frames adds t segments of h * w rows; cu_seqlens before the
/// int32 conversion, frame_cu_seqlens in frameshard/tower.h).
std::vector<int64_t> frame_offsets(const std::vector<GridThw>& grid);

/// Converts nested rows (from JSON or a tensor) into grid rows, rejecting an
/// empty list and rows that do not have exactly three entries ("ragged").
/// `what` names the source in error messages (e.g. "grid_thw").
std::vector<GridThw> grid_from_rows(
    const std::vector<std::vector<int64_t>>& rows,
    const char* what = "grid_thw");

}  // namespace frameshard
