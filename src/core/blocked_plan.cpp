// make_blocked_plan (frameshard/plan.h): each block of units partitioned
// over its own block of ranks, then built as make_plan builds its ranks.
#include <frameshard/error.h>
#include <frameshard/plan.h>
#include <frameshard/split_plan.h>

#include "core/plan_build.h"

#include <algorithm>
#include <numeric>

namespace frameshard {

namespace {

constexpr const char* kBlockedFn = "make_blocked_plan";

// The grid row each block starts at (blocks + 1 entries), checking that the
// unit offsets fall on media boundaries.
std::vector<size_t> block_rows(
    const FrameSet& frames, const std::vector<int64_t>& unit_blocks) {
  const int64_t n = static_cast<int64_t>(frames.units.size());
  FRAMESHARD_CHECK(
      unit_blocks.size() >= 2 && unit_blocks.front() == 0 &&
          unit_blocks.back() == n &&
          std::is_sorted(unit_blocks.begin(), unit_blocks.end()),
      kBlockedFn,
      "expected unit_blocks non-decreasing from 0 to ",
      n,
      " (the frame units), got ",
      unit_blocks.size(),
      " offsets ending at ",
      unit_blocks.empty() ? -1 : unit_blocks.back());
  std::vector<size_t> rows;
  size_t row = 0;
  int64_t first_unit = 0;
  for (int64_t u : unit_blocks) {
    while (row < frames.grid.size() && first_unit < u) {
      first_unit += frames.grid[row++].t;
    }
    FRAMESHARD_CHECK(
        first_unit == u,
        kBlockedFn,
        "expected block offsets on media boundaries, got unit ",
        u,
        " inside grid row ",
        row - 1);
    rows.push_back(row);
  }
  return rows;
}

// Block b's split partition over its k ranks (units [u0, u1) of the plan,
// costed as the plan costed them); a block without units holds k empty
// ranks.
SplitPartition block_split(
    const ShardPlan& plan,
    const std::vector<size_t>& rows,
    size_t b,
    int64_t k,
    int64_t u0,
    int64_t u1) {
  const std::vector<GridThw> grid(
      plan.frames.grid.begin() + static_cast<std::ptrdiff_t>(rows[b]),
      plan.frames.grid.begin() + static_cast<std::ptrdiff_t>(rows[b + 1]));
  SplitPartition sp;
  if (grid.empty()) {
    sp.row_cuts.assign(static_cast<size_t>(k + 1), 0);
    sp.rank_costs.assign(static_cast<size_t>(k), 0.0);
    return sp;
  }
  PlanOptions o = plan.options;
  o.world = k;
  return split_partition(
      expand_frames(grid, o.layout),
      o,
      {plan.unit_costs.begin() + u0, plan.unit_costs.begin() + u1});
}

// The blocks' split partitions as one over the whole world. False when no
// block is cut (the whole-frame partition then stands).
bool join_splits(
    const ShardPlan& plan,
    const std::vector<size_t>& rows,
    const std::vector<int64_t>& unit_blocks,
    int64_t k,
    SplitPartition& out) {
  const FrameSet& frames = plan.frames;
  const int64_t n = static_cast<int64_t>(frames.units.size());
  out.row_cuts.clear();
  out.rank_costs.clear();
  for (size_t b = 0; b + 1 < rows.size(); ++b) {
    const int64_t u = unit_blocks[b];
    const SplitPartition sp =
        block_split(plan, rows, b, k, u, unit_blocks[b + 1]);
    const int64_t offset =
        u < n ? frames.units[u].pixel_offset : frames.total_patch_rows;
    for (int64_t r = 0; r < k; ++r) {
      out.row_cuts.push_back(offset + sp.row_cuts[r]);
    }
    out.rank_costs.insert(
        out.rank_costs.end(), sp.rank_costs.begin(), sp.rank_costs.end());
    out.max_cost = std::max(out.max_cost, sp.max_cost);
    out.unsplit_max_cost = std::max(out.unsplit_max_cost, sp.unsplit_max_cost);
    out.split = out.split || sp.split;
  }
  out.row_cuts.push_back(frames.total_patch_rows);
  return out.split;
}

}  // namespace

ShardPlan make_blocked_plan(
    const std::vector<GridThw>& grid,
    const PlanOptions& opts,
    const std::vector<int64_t>& unit_blocks,
    const std::string& reason) {
  internal::check_plan_options(opts);
  ShardPlan plan;
  plan.options = opts;
  plan.frames = expand_frames(grid, opts.layout);
  plan.unit_costs = internal::unit_costs(plan.frames, opts.cost);
  plan.path = PlanPath::kSharded;
  plan.reason = reason;
  const std::vector<size_t> rows = block_rows(plan.frames, unit_blocks);
  const int64_t blocks = static_cast<int64_t>(unit_blocks.size()) - 1;
  FRAMESHARD_CHECK(
      opts.world % blocks == 0,
      kBlockedFn,
      "expected options.world a multiple of the ",
      blocks,
      " blocks, got ",
      opts.world);
  const int64_t k = opts.world / blocks;

  Partition& part = plan.partition;
  part.method = opts.partitioner;
  part.world = opts.world;
  part.assignment.resize(plan.unit_costs.size());
  part.rank_costs.assign(static_cast<size_t>(opts.world), 0.0);
  const bool contiguous = traits(opts.partitioner).contiguous;
  if (contiguous) {
    part.cuts.assign(static_cast<size_t>(opts.world + 1), 0);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t u0 = unit_blocks[b];
    const std::vector<double> costs(
        plan.unit_costs.begin() + u0,
        plan.unit_costs.begin() + unit_blocks[b + 1]);
    const Partition p = partition_costs(costs, k, opts.partitioner);
    for (size_t i = 0; i < costs.size(); ++i) {
      part.assignment[u0 + static_cast<int64_t>(i)] = b * k + p.assignment[i];
    }
    for (int64_t r = 0; r < k; ++r) {
      part.rank_costs[b * k + r] = p.rank_costs[r];
      if (contiguous) {
        part.cuts[b * k + r] = u0 + p.cuts[r];
      }
    }
  }
  if (contiguous) {
    part.cuts.back() = unit_blocks.back();
  }
  if (traits(opts.partitioner).exact) {
    plan.unsplit_max_cost = part.max_cost();
  }
  SplitPartition sp;
  if (opts.split.enabled && join_splits(plan, rows, unit_blocks, k, sp)) {
    internal::finish_split_plan(plan, sp);
    return plan;
  }
  internal::finish_plan(plan, /*dummy_for_empty=*/true);
  return plan;
}

}  // namespace frameshard
