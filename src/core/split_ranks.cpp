// The ranks of a split plan (core/split_ranks.h).
#include "core/split_ranks.h"

#include <algorithm>

namespace frameshard {
namespace internal {

namespace {

// Unit holding pixel row x.
int64_t unit_of_row(const FrameSet& frames, int64_t x) {
  const std::vector<FrameUnit>& units = frames.units;
  auto it = std::upper_bound(
      units.begin(), units.end(), x, [](int64_t row, const FrameUnit& u) {
        return row < u.pixel_offset;
      });
  return static_cast<int64_t>(it - units.begin()) - 1;
}

void add_dummy(const MediaLayout& layout, RankShard& rs) {
  const int64_t merge = layout.spatial_merge_size;
  rs.dummy_frames = 1;
  rs.grid.push_back(GridThw{1, merge, merge});
  rs.cu_seqlens.push_back(rs.cu_seqlens.back() + merge * merge);
  rs.local_patch_rows += merge * merge;
  rs.local_tokens += 1;
}

// Rank `rs` holds pixel rows [x, y) (x < y): whole frames of one media item
// share a (count, h, w) grid row, a partial frame (piece) has its own.
void build_rows(
    const FrameSet& frames,
    int64_t x,
    int64_t y,
    int64_t min_local_patch_rows,
    RankShard& rs) {
  const int64_t merge2 =
      frames.layout.spatial_merge_size * frames.layout.spatial_merge_size;
  const int64_t first = unit_of_row(frames, x);
  const int64_t last = unit_of_row(frames, y - 1);
  rs.pixel_ranges.push_back(RowRange{x, y});
  int64_t open_media = -1;  // media of a whole-frame grid row still open
  for (int64_t u = first; u <= last; ++u) {
    const FrameUnit& unit = frames.units[u];
    const int64_t begin = std::max(x, unit.pixel_offset) - unit.pixel_offset;
    const int64_t end =
        std::min(y, unit.pixel_offset + unit.patch_rows) - unit.pixel_offset;
    const int64_t local = static_cast<int64_t>(rs.units.size());
    rs.units.push_back(u);
    if (begin > 0 || end < unit.patch_rows) {
      rs.pieces.push_back(FramePiece{local, begin, end});
      rs.exchange_rows += unit.patch_rows - (end - begin);
      rs.grid.push_back(GridThw{1, unit.h, unit.w});
      open_media = -1;
    } else if (open_media == unit.media) {
      rs.grid.back().t += 1;
    } else {
      rs.grid.push_back(GridThw{1, unit.h, unit.w});
      open_media = unit.media;
    }
    rs.cu_seqlens.push_back(rs.cu_seqlens.back() + (end - begin));
  }
  rs.real_patch_rows = y - x;
  rs.real_tokens = rs.real_patch_rows / merge2;
  rs.local_patch_rows = rs.real_patch_rows;
  rs.local_tokens = rs.real_tokens;

  // Floor frames at the resolution of the last real frame, as unsplit.
  const FrameUnit& tail = frames.units[last];
  const int64_t hw = tail.h * tail.w;
  rs.pad_frames =
      floor_pad_frames(rs.real_patch_rows, hw, min_local_patch_rows);
  if (rs.pad_frames > 0) {
    rs.grid.push_back(GridThw{rs.pad_frames, tail.h, tail.w});
    for (int64_t f = 0; f < rs.pad_frames; ++f) {
      rs.cu_seqlens.push_back(rs.cu_seqlens.back() + hw);
    }
    rs.local_patch_rows += rs.pad_frames * hw;
    rs.local_tokens += rs.pad_frames * (hw / merge2);
  }
}

}  // namespace

void build_split_ranks(ShardPlan& plan, const SplitPartition& split) {
  const FrameSet& frames = plan.frames;
  const int64_t world = plan.options.world;
  const int64_t n = static_cast<int64_t>(frames.units.size());
  const std::vector<int64_t>& rows = split.row_cuts;

  Partition& part = plan.partition;
  part.method = Partitioner::kOptimal;
  part.world = world;
  part.rank_costs = split.rank_costs;
  part.cuts.assign(static_cast<size_t>(world + 1), n);
  part.assignment.assign(static_cast<size_t>(n), 0);
  plan.ranks.assign(static_cast<size_t>(world), RankShard{});
  plan.gather_counts.assign(static_cast<size_t>(world), 0);
  for (int64_t r = 0; r < world; ++r) {
    RankShard& rs = plan.ranks[r];
    rs.rank = r;
    rs.cu_seqlens.push_back(0);
    rs.cost = split.rank_costs[r];
    if (rows[r] < frames.total_patch_rows) {
      part.cuts[r] = unit_of_row(frames, rows[r]);
    }
    if (rows[r] == rows[r + 1]) {
      add_dummy(frames.layout, rs);
      continue;
    }
    build_rows(
        frames, rows[r], rows[r + 1], plan.options.min_local_patch_rows, rs);
    for (int64_t u : rs.units) {
      if (frames.units[u].pixel_offset >= rows[r]) {
        part.assignment[u] = r;
      }
    }
    plan.gather_counts[r] = rs.real_tokens;
  }
  plan.restore_rows.clear();
  plan.split = true;
  plan.unsplit_max_cost = split.unsplit_max_cost;
}

}  // namespace internal
}  // namespace frameshard
