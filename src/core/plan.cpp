#include <frameshard/error.h>
#include <frameshard/plan.h>
#include <frameshard/split_plan.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <numeric>

#include "core/fingerprint.h"
#include "core/plan_build.h"
#include "core/split_ranks.h"

namespace frameshard {

namespace {

// Most tokens of a plan with restore_rows (plan.h, "Limit").
constexpr int64_t kMaxRestoreRows = int64_t{1} << 27;

// Each rank's units as maximal runs [a, b) of consecutive unit indices,
// flattened: rank r owns runs [offset[r], offset[r + 1]). A contiguous
// partition has at most one run per rank, read straight off the cuts (not
// in split plans: there cuts[r] is only the first unit rank r touches).
struct Runs {
  std::vector<int64_t> a;
  std::vector<int64_t> b;
  std::vector<size_t> offset;

  explicit Runs(const ShardPlan& plan) {
    const size_t world = plan.ranks.size();
    offset.reserve(world + 1);
    offset.push_back(0);
    const std::vector<int64_t>& cuts = plan.partition.cuts;
    if (plan.partition.contiguous() && !plan.split) {
      a.reserve(world);
      b.reserve(world);
      for (size_t r = 0; r < world; ++r) {
        if (cuts[r] < cuts[r + 1]) {
          a.push_back(cuts[r]);
          b.push_back(cuts[r + 1]);
        }
        offset.push_back(a.size());
      }
      return;
    }
    for (const RankShard& rs : plan.ranks) {
      const std::vector<int64_t>& units = rs.units;
      for (size_t i = 0; i < units.size(); ++i) {
        if (i == 0 || units[i] != units[i - 1] + 1) {
          a.push_back(units[i]);
          b.push_back(units[i] + 1);
        } else {
          b.back() += 1;
        }
      }
      offset.push_back(a.size());
    }
  }
};

// Everything the ranks must agree on, as one canonical int64 stream; every
// list is preceded by its length so distinct plans cannot produce the same
// stream. The frame units enter through the grid rows they expand from (a
// pure function of grid and layout), and the assignment through each rank's
// runs of consecutive units: the same information as listing every unit and
// its rank, in a few words per rank instead of five per unit.
uint64_t plan_fingerprint(const ShardPlan& plan, const Runs& runs) {
  internal::Fingerprint fp;
  fp.add(0x66736870);  // "fshp", format version 1
  fp.add(1);
  fp.add(plan.path == PlanPath::kSharded ? 1 : 0);
  fp.add(plan.options.world);
  fp.add(static_cast<int64_t>(plan.partition.method));
  fp.add(plan.frames.layout.spatial_merge_size);
  fp.add(plan.frames.layout.temporal_patch_size);
  fp.add(static_cast<int64_t>(plan.frames.grid.size()));
  for (const GridThw& g : plan.frames.grid) {
    fp.add(g.t);
    fp.add(g.h);
    fp.add(g.w);
  }
  fp.add(static_cast<int64_t>(plan.frames.units.size()));
  fp.add(static_cast<int64_t>(plan.ranks.size()));
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankShard& rank = plan.ranks[r];
    fp.add(static_cast<int64_t>(runs.offset[r + 1] - runs.offset[r]));
    for (size_t i = runs.offset[r]; i < runs.offset[r + 1]; ++i) {
      fp.add(runs.a[i]);
      fp.add(runs.b[i]);
    }
    fp.add(static_cast<int64_t>(rank.grid.size()));
    for (const GridThw& g : rank.grid) {
      fp.add(g.t);
      fp.add(g.h);
      fp.add(g.w);
    }
    fp.add(rank.pad_frames);
    fp.add(rank.dummy_frames);
    if (plan.split) {
      // Only split plans hash pieces, so unsplit fingerprints are unchanged.
      fp.add(static_cast<int64_t>(rank.pieces.size()));
      for (const FramePiece& p : rank.pieces) {
        fp.add(rank.units[static_cast<size_t>(p.frame)]);
        fp.add(p.begin);
        fp.add(p.end);
      }
    }
  }
  fp.add(static_cast<int64_t>(plan.gather_counts.size()));
  for (int64_t c : plan.gather_counts) {
    fp.add(c);
  }
  return fp.finish();
}

// Per media item: its first unit, first pixel row and first token row
// (media.size() + 1 entries each), so a rank is built run by run from the
// grid without touching every FrameUnit again.
struct MediaIndex {
  std::vector<int64_t> first_unit;
  std::vector<int64_t> first_pixel;
  std::vector<int64_t> first_token;

  explicit MediaIndex(const FrameSet& frames) {
    const size_t m = frames.grid.size();
    const int64_t merge2 =
        frames.layout.spatial_merge_size * frames.layout.spatial_merge_size;
    first_unit.resize(m + 1);
    first_pixel.resize(m + 1);
    first_token.resize(m + 1);
    first_unit[0] = first_pixel[0] = first_token[0] = 0;
    for (size_t i = 0; i < m; ++i) {
      const GridThw& g = frames.grid[i];
      first_unit[i + 1] = first_unit[i] + g.t;
      first_pixel[i + 1] = first_pixel[i] + g.t * g.h * g.w;
      first_token[i + 1] = first_token[i] + g.t * (g.h * g.w / merge2);
    }
  }

  // Media item holding unit `u`.
  int64_t media_of(int64_t u) const {
    return static_cast<int64_t>(
               std::upper_bound(first_unit.begin(), first_unit.end(), u) -
               first_unit.begin()) -
           1;
  }
};

void build_rank(
    const FrameSet& frames,
    const MediaIndex& index,
    const Runs& runs,
    const PlanOptions& opts,
    bool add_dummy,
    RankShard& rs) {
  const size_t first_run = runs.offset[rs.rank];
  const size_t last_run = runs.offset[rs.rank + 1];
  const int64_t merge = frames.layout.spatial_merge_size;
  const int64_t merge2 = merge * merge;
  auto pixel_of = [&](int64_t unit, int64_t m) {
    const GridThw& g = frames.grid[m];
    return index.first_pixel[m] + (unit - index.first_unit[m]) * g.h * g.w;
  };

  // First pass over the runs: grid rows, real rows and the last real frame,
  // so every vector is sized once (floor frames included).
  size_t grid_rows = 2;  // floor and dummy rows
  int64_t last_media = -1;
  for (size_t i = first_run; i < last_run; ++i) {
    const int64_t ma = index.media_of(runs.a[i]);
    const int64_t mb = index.media_of(runs.b[i] - 1);
    grid_rows += static_cast<size_t>(mb - ma + 1);
    const GridThw& gb = frames.grid[mb];
    rs.real_patch_rows +=
        pixel_of(runs.b[i] - 1, mb) + gb.h * gb.w - pixel_of(runs.a[i], ma);
    last_media = mb;
  }
  int64_t pad_hw = 0;
  if (last_media >= 0) {
    const GridThw& last = frames.grid[last_media];
    pad_hw = last.h * last.w;
    rs.pad_frames =
        floor_pad_frames(rs.real_patch_rows, pad_hw, opts.min_local_patch_rows);
  } else if (add_dummy) {
    rs.dummy_frames = 1;
  }
  rs.grid.reserve(grid_rows);
  rs.pixel_ranges.reserve(last_run - first_run);
  rs.cu_seqlens.resize(
      rs.units.size() + static_cast<size_t>(rs.pad_frames + rs.dummy_frames) +
      1);
  int64_t* cu = rs.cu_seqlens.data();
  *cu++ = 0;
  int64_t rows = 0;

  // Consecutive frames of one media item form one (count, h, w) row; runs
  // are maximal, so a row never continues across runs, and different media
  // (every image) stay separate.
  for (size_t i = first_run; i < last_run; ++i) {
    int64_t a = runs.a[i];
    const int64_t b = runs.b[i];
    int64_t m = index.media_of(a);
    while (a < b) {
      const GridThw& g = frames.grid[m];
      const int64_t run_end = std::min(b, index.first_unit[m + 1]);
      const int64_t count = run_end - a;
      const int64_t hw = g.h * g.w;
      rs.grid.push_back(GridThw{count, g.h, g.w});
      const int64_t begin = pixel_of(a, m);
      if (!rs.pixel_ranges.empty() && rs.pixel_ranges.back().end == begin) {
        rs.pixel_ranges.back().end += count * hw;
      } else {
        rs.pixel_ranges.push_back(RowRange{begin, begin + count * hw});
      }
      for (int64_t f = 0; f < count; ++f) {
        rows += hw;
        *cu++ = rows;
      }
      rs.real_tokens += count * (hw / merge2);
      a = run_end;
      ++m;
    }
  }
  rs.local_patch_rows = rs.real_patch_rows;
  rs.local_tokens = rs.real_tokens;

  if (rs.pad_frames > 0) {
    const GridThw& last = frames.grid[last_media];
    rs.grid.push_back(GridThw{rs.pad_frames, last.h, last.w});
    for (int64_t f = 0; f < rs.pad_frames; ++f) {
      rows += pad_hw;
      *cu++ = rows;
    }
    rs.local_patch_rows += rs.pad_frames * pad_hw;
    rs.local_tokens += rs.pad_frames * (pad_hw / merge2);
  }
  if (rs.dummy_frames > 0) {
    rs.grid.push_back(GridThw{1, merge, merge});
    rows += merge2;
    *cu++ = rows;
    rs.local_patch_rows += merge2;
    rs.local_tokens += 1;
  }
}

}  // namespace

std::string to_string(PlanPath p) {
  return p == PlanPath::kSharded ? "sharded" : "replicated";
}

int64_t floor_pad_frames(
    int64_t local_patch_rows,
    int64_t frame_rows,
    int64_t min_local_patch_rows) {
  const char* fn = "floor_pad_frames";
  FRAMESHARD_CHECK(
      local_patch_rows >= 0,
      fn,
      "expected local_patch_rows >= 0, got ",
      local_patch_rows);
  FRAMESHARD_CHECK(
      frame_rows >= 0, fn, "expected frame_rows >= 0, got ", frame_rows);
  FRAMESHARD_CHECK(
      min_local_patch_rows >= 0,
      fn,
      "expected min_local_patch_rows >= 0, got ",
      min_local_patch_rows);
  FRAMESHARD_CHECK(
      min_local_patch_rows <= kMaxMinLocalPatchRows,
      fn,
      "expected min_local_patch_rows in [0, ",
      kMaxMinLocalPatchRows,
      "], got ",
      min_local_patch_rows);
  if (min_local_patch_rows == 0 || frame_rows == 0 ||
      local_patch_rows >= min_local_patch_rows) {
    return 0;
  }
  const int64_t missing = min_local_patch_rows - local_patch_rows;
  return (missing + frame_rows - 1) / frame_rows;
}

namespace internal {

void check_plan_options(const PlanOptions& opts) {
  FRAMESHARD_CHECK(
      opts.world >= 1,
      "make_plan",
      "expected options.world >= 1, got ",
      opts.world);
  FRAMESHARD_CHECK(
      opts.world <= kMaxWorld,
      "make_plan",
      "expected options.world (cp_size) in [1, ",
      kMaxWorld,
      "], got ",
      opts.world);
  FRAMESHARD_CHECK(
      opts.min_local_patch_rows >= 0,
      "make_plan",
      "expected options.min_local_patch_rows >= 0, got ",
      opts.min_local_patch_rows);
  FRAMESHARD_CHECK(
      opts.min_local_patch_rows <= kMaxMinLocalPatchRows,
      "make_plan",
      "expected options.min_local_patch_rows in [0, ",
      kMaxMinLocalPatchRows,
      "], got ",
      opts.min_local_patch_rows);
  FRAMESHARD_CHECK(
      !opts.split.enabled || traits(opts.partitioner).supports_split,
      "make_plan",
      "options.split.enabled: expected partitioner optimal (frames are split "
      "by the optimal partitioner only), got ",
      to_string(opts.partitioner));
}

std::vector<double> unit_costs(const FrameSet& frames, const CostModel& cost) {
  // Every frame of one media item has the same size, hence the same cost.
  std::vector<double> costs(frames.units.size());
  auto out = costs.begin();
  for (const GridThw& g : frames.grid) {
    out = std::fill_n(out, g.t, cost(g.h * g.w));
  }
  return costs;
}

void finish_split_plan(ShardPlan& plan, const SplitPartition& split) {
  build_split_ranks(plan, split);
  plan.fingerprint = plan_fingerprint(plan, Runs(plan));
}

}  // namespace internal

ShardPlan make_plan(const std::vector<GridThw>& grid, const PlanOptions& opts) {
  internal::check_plan_options(opts);

  ShardPlan plan;
  plan.options = opts;
  plan.frames = expand_frames(grid, opts.layout);
  const FrameSet& frames = plan.frames;
  const int64_t n = static_cast<int64_t>(frames.units.size());
  const int64_t world = opts.world;

  plan.unit_costs = internal::unit_costs(frames, opts.cost);

  plan.partition = partition_costs(plan.unit_costs, world, opts.partitioner);
  const PolicyDecision decision = decide_policy(
      opts.policy, opts.cost, frames, plan.unit_costs, plan.partition);
  plan.path = decision.shard ? PlanPath::kSharded : PlanPath::kReplicated;
  plan.reason = decision.reason;
  // The auto policy weighs the whole-frame partition (a split plan only
  // lowers the slowest rank further).
  if (traits(opts.partitioner).exact) {
    plan.unsplit_max_cost = plan.partition.max_cost();
  }
  if (opts.split.enabled && plan.path == PlanPath::kSharded) {
    const SplitPartition sp = split_partition(frames, opts, plan.unit_costs);
    if (sp.split) {
      internal::finish_split_plan(plan, sp);
      return plan;
    }
  }
  internal::finish_plan(plan, n > 0 && n < world);
  return plan;
}

namespace internal {

void finish_plan(ShardPlan& plan, bool dummy_for_empty) {
  const PlanOptions& opts = plan.options;
  const FrameSet& frames = plan.frames;
  const int64_t n = static_cast<int64_t>(frames.units.size());
  const int64_t world = opts.world;
  const std::vector<int64_t>& assignment = plan.partition.assignment;

  // Units per rank, ascending.
  plan.ranks.resize(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    plan.ranks[r].rank = r;
  }
  if (plan.partition.contiguous()) {
    const std::vector<int64_t>& cuts = plan.partition.cuts;
    for (int64_t r = 0; r < world; ++r) {
      std::vector<int64_t>& units = plan.ranks[r].units;
      units.resize(static_cast<size_t>(cuts[r + 1] - cuts[r]));
      std::iota(units.begin(), units.end(), cuts[r]);
    }
  } else {
    std::vector<int64_t> counts(static_cast<size_t>(world), 0);
    for (int64_t r : assignment) {
      counts[r] += 1;
    }
    for (int64_t r = 0; r < world; ++r) {
      plan.ranks[r].units.reserve(static_cast<size_t>(counts[r]));
    }
    for (int64_t i = 0; i < n; ++i) {
      plan.ranks[assignment[i]].units.push_back(i);
    }
  }

  const MediaIndex index(frames);
  const Runs runs(plan);
  plan.gather_counts.resize(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    RankShard& rs = plan.ranks[r];
    build_rank(frames, index, runs, opts, dummy_for_empty, rs);
    rs.cost = plan.partition.rank_costs[r];
    plan.gather_counts[r] = rs.real_tokens;
  }

  // The gather concatenates rank-major; unless the assignment is
  // non-decreasing that order differs from the original one. A run of
  // consecutive units owns a contiguous block of original token rows.
  if (!plan.partition.contiguous() &&
      !std::is_sorted(assignment.begin(), assignment.end())) {
    // One entry per token: refuse before sizing it by the input (found by
    // tests/fuzz/plan_fuzz: an lpt plan of 2^38 tokens threw length_error).
    FRAMESHARD_CHECK(
        frames.total_tokens <= kMaxRestoreRows,
        "make_plan",
        "expected at most ",
        kMaxRestoreRows,
        " tokens in a non-contiguous (lpt) plan, got ",
        frames.total_tokens);
    plan.restore_rows.resize(static_cast<size_t>(frames.total_tokens));
    int64_t gathered = 0;
    for (size_t i = 0; i < runs.a.size(); ++i) {
      const int64_t begin = frames.units[runs.a[i]].token_offset;
      const int64_t end = runs.b[i] < n ? frames.units[runs.b[i]].token_offset
                                        : frames.total_tokens;
      auto first = plan.restore_rows.begin() + begin;
      std::iota(first, first + (end - begin), gathered);
      gathered += end - begin;
    }
  }

  plan.fingerprint = plan_fingerprint(plan, runs);
}

}  // namespace internal

uint64_t recompute_fingerprint(const ShardPlan& plan) {
  return plan_fingerprint(plan, Runs(plan));
}

std::string fingerprint_hex(uint64_t fingerprint) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, fingerprint);
  return buf;
}

}  // namespace frameshard
