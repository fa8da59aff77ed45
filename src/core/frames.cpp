#include <frameshard/error.h>
#include <frameshard/frames.h>

#include <limits>

namespace frameshard {

namespace {

// Product of positive factors, or -1 when it does not fit in int64 (grids
// from untrusted JSON can hold anything).
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return -1;
  }
  return out;
}

// See frames.h ("Limits").
constexpr int64_t kMaxSpatialMergeSize = int64_t{1} << 20;

}  // namespace

FrameSet expand_frames(
    const std::vector<GridThw>& grid, const MediaLayout& layout) {
  const int64_t merge = layout.spatial_merge_size;
  FRAMESHARD_CHECK(
      merge > 0,
      "expand_frames",
      "expected layout.spatial_merge_size > 0, got ",
      merge);
  // Bounded so merge^2 (the rows of a dummy frame) fits in int64: plan_fuzz
  // found 2^62 with an empty grid, a signed overflow.
  FRAMESHARD_CHECK(
      merge <= kMaxSpatialMergeSize,
      "expand_frames",
      "expected layout.spatial_merge_size <= ",
      kMaxSpatialMergeSize,
      ", got ",
      merge);
  FRAMESHARD_CHECK(
      layout.temporal_patch_size > 0,
      "expand_frames",
      "expected layout.temporal_patch_size > 0, got ",
      layout.temporal_patch_size);

  FrameSet fs;
  fs.layout = layout;
  fs.grid = grid;

  // Validate everything first so the unit vector is sized once.
  int64_t total_units = 0;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < grid.size(); ++i) {
    const GridThw& g = grid[i];
    FRAMESHARD_CHECK(
        g.t > 0,
        "expand_frames",
        "expected grid_thw[",
        i,
        "].t > 0, got ",
        g.t);
    FRAMESHARD_CHECK(
        g.h > 0,
        "expand_frames",
        "expected grid_thw[",
        i,
        "].h > 0, got ",
        g.h);
    FRAMESHARD_CHECK(
        g.w > 0,
        "expand_frames",
        "expected grid_thw[",
        i,
        "].w > 0, got ",
        g.w);
    FRAMESHARD_CHECK(
        g.h % merge == 0,
        "expand_frames",
        "expected grid_thw[",
        i,
        "].h divisible by spatial_merge_size ",
        merge,
        ", got ",
        g.h);
    FRAMESHARD_CHECK(
        g.w % merge == 0,
        "expand_frames",
        "expected grid_thw[",
        i,
        "].w divisible by spatial_merge_size ",
        merge,
        ", got ",
        g.w);
    const int64_t hw = checked_mul(g.h, g.w);
    const int64_t thw = hw < 0 ? -1 : checked_mul(g.t, hw);
    FRAMESHARD_CHECK(
        thw >= 0 && fs.total_patch_rows <= kMax - thw &&
            total_units <= kMax - g.t,
        "expand_frames",
        "expected grid_thw[",
        i,
        "] with a total patch count representable in int64, got (",
        g.t,
        ", ",
        g.h,
        ", ",
        g.w,
        ")");
    fs.total_patch_rows += thw;
    total_units += g.t;
    // Before the unit vector is sized by the input.
    FRAMESHARD_CHECK(
        total_units <= kMaxFrameUnits,
        "expand_frames",
        "expected at most ",
        kMaxFrameUnits,
        " frame units (sum of grid_thw t) in a batch, got more by grid_thw[",
        i,
        "] (t = ",
        g.t,
        ")");
  }

  fs.units.resize(static_cast<size_t>(total_units));
  FrameUnit* out = fs.units.data();
  const int64_t merge2 = merge * merge;
  int64_t pixel = 0;
  int64_t token = 0;
  for (size_t i = 0; i < grid.size(); ++i) {
    const GridThw& g = grid[i];
    const int64_t rows = g.h * g.w;
    const int64_t tokens = rows / merge2;
    for (int64_t f = 0; f < g.t; ++f) {
      // Fields are written in place: building a local FrameUnit and
      // push_back-ing it made the compiler reload 8-byte stores as 16-byte
      // loads, a store-forwarding stall that quadrupled this loop's cost.
      FrameUnit& u = *out++;
      u.media = static_cast<int64_t>(i);
      u.frame = f;
      u.h = g.h;
      u.w = g.w;
      u.patch_rows = rows;
      u.tokens = tokens;
      u.pixel_offset = pixel;
      u.token_offset = token;
      pixel += rows;
      token += tokens;
    }
  }
  fs.total_tokens = token;
  return fs;
}

void check_pixel_rows(const FrameSet& frames, int64_t pixel_rows) {
  FRAMESHARD_CHECK(
      pixel_rows == frames.total_patch_rows,
      "check_pixel_rows",
      "expected pixel_values rows == sum(t*h*w) of grid_thw = ",
      frames.total_patch_rows,
      ", got ",
      pixel_rows);
}

std::vector<GridThw> grid_from_rows(
    const std::vector<std::vector<int64_t>>& rows, const char* what) {
  FRAMESHARD_CHECK(
      !rows.empty(),
      "grid_from_rows",
      "expected a non-empty ",
      what,
      " list of [t, h, w] rows, got an empty list");
  std::vector<GridThw> grid;
  grid.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    FRAMESHARD_CHECK(
        rows[i].size() == 3,
        "grid_from_rows",
        "expected ",
        what,
        "[",
        i,
        "] to have 3 entries (t, h, w), got ",
        rows[i].size(),
        " (ragged rows)");
    grid.push_back(GridThw{rows[i][0], rows[i][1], rows[i][2]});
  }
  return grid;
}

std::vector<int64_t> frame_offsets(const std::vector<GridThw>& grid) {
  std::vector<int64_t> cu{0};
  for (const GridThw& g : grid) {
    for (int64_t f = 0; f < g.t; ++f) {
      cu.push_back(cu.back() + g.h * g.w);
    }
  }
  return cu;
}

}  // namespace frameshard
