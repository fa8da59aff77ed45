#include <frameshard/analyze.h>
#include <frameshard/dedup.h>
#include <frameshard/error.h>
#include <frameshard/policy.h>
#include <frameshard/workload.h>

namespace frameshard {

namespace {

MethodSummary summarize(
    const std::vector<std::vector<GridThw>>& batches,
    PlanOptions o,
    Partitioner method) {
  o.partitioner = method;
  MethodSummary m;
  m.method = method;
  double replicated = 0.0, vision = 0.0, with_gather = 0.0;
  double imbalance_sharded = 0.0, imbalance_media = 0.0, gather_bytes = 0.0;
  int64_t sharded = 0, with_media = 0;
  for (const std::vector<GridThw>& grid : batches) {
    // A batch without media (text-only samples) plans to the replicated
    // path with nothing to encode: it adds no vision cost to either side
    // and counts as not sharded.
    const ShardPlan plan = make_plan(grid, o);
    const PolicyEstimate e = estimate_policy(
        o.policy, o.cost, plan.frames, plan.unit_costs, plan.partition);
    replicated += e.replicated_seconds;
    if (!plan.frames.units.empty()) {
      with_media += 1;
      imbalance_media += plan.partition.imbalance();
    }
    if (plan.sharded()) {
      sharded += 1;
      vision += e.slowest_seconds;
      with_gather += e.slowest_seconds + e.gather_seconds;
      imbalance_sharded += plan.partition.imbalance();
      gather_bytes += e.gather_seconds * o.policy.gather_bandwidth_gbps * 1e9;
    } else {
      vision += e.replicated_seconds;
      with_gather += e.replicated_seconds;
    }
  }
  const auto n = static_cast<double>(batches.size());
  m.shard_share = static_cast<double>(sharded) / n;
  m.speedup = vision > 0.0 ? replicated / vision : 1.0;
  m.speedup_gather = with_gather > 0.0 ? replicated / with_gather : 1.0;
  // No vision work at all (every batch text-only): the ratios stay 1, not
  // 0 / 0.
  if (sharded > 0) {
    m.imbalance = imbalance_sharded / static_cast<double>(sharded);
  } else if (with_media > 0) {
    m.imbalance = imbalance_media / static_cast<double>(with_media);
  }
  m.gather_mb =
      sharded > 0 ? gather_bytes / static_cast<double>(sharded) / 1e6 : 0.0;
  return m;
}

}  // namespace

WorkloadAnalysis analyze_batches(
    const std::vector<std::vector<GridThw>>& batches,
    const AnalyzeOptions& options) {
  const char* fn = "analyze_batches";
  FRAMESHARD_CHECK(
      !batches.empty(), fn, "expected at least one batch, got none");
  FRAMESHARD_CHECK(
      options.media_ids.empty() || options.media_ids.size() == batches.size(),
      fn,
      "expected media ids for each of the ",
      batches.size(),
      " batches or none, got ",
      options.media_ids.size());
  WorkloadAnalysis a;
  a.batches = static_cast<int64_t>(batches.size());
  // The grids planned: each batch, or with dedup its distinct units.
  std::vector<std::vector<GridThw>> planned;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const std::vector<GridThw>& grid = batches[b];
    const FrameSet f = expand_frames(grid, options.plan.layout);
    a.batches_without_media += f.units.empty() ? 1 : 0;
    a.frame_units += static_cast<int64_t>(f.units.size());
    a.tokens += f.total_tokens;
    a.patch_rows += f.total_patch_rows;
    if (options.media_ids.empty()) {
      a.distinct_frame_units += static_cast<int64_t>(f.units.size());
      a.distinct_tokens += f.total_tokens;
      a.distinct_patch_rows += f.total_patch_rows;
      planned.push_back(grid);
      continue;
    }
    const MediaLayout& layout = options.plan.layout;
    const FrameDedup d = dedup_frames(
        grid, media_id_unit_keys(grid, options.media_ids[b], layout), layout);
    a.distinct_frame_units += d.distinct_units;
    a.distinct_tokens += d.distinct_tokens;
    a.distinct_patch_rows += d.distinct_patch_rows;
    planned.push_back(options.dedup ? d.grid : grid);
  }
  for (int64_t cp : options.cps) {
    FRAMESHARD_CHECK(
        cp >= 1 && cp <= kMaxWorld,
        fn,
        "expected CP sizes in [1, ",
        kMaxWorld,
        "], got ",
        cp);
    PlanOptions o = options.plan;
    o.world = cp;
    CpSummary row;
    row.cp = cp;
    for (Partitioner p : options.partitioners) {
      row.methods.push_back(summarize(planned, o, p));
    }
    a.rows.push_back(std::move(row));
  }
  return a;
}

}  // namespace frameshard
