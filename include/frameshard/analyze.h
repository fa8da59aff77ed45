// File: frameshard/analyze.h
//
// "Check your workload": for a list of batches (each a grid_thw list, e.g.
// from a dataset manifest, frameshard/media_manifest.h), plan every batch
// at each CP size with each partitioner and the configured policy, and sum
// up per (CP, partitioner):
//   shard_share   batches the policy shards / batches
//   speedup       vision speed-up from the cost model: sum of replicated
//                 costs / sum of (slowest rank if sharded, else replicated)
//   speedup_gather  the same with each sharded batch's modelled gather
//                 time added (PolicyEstimate: seconds from the cost
//                 model's seconds_per_unit, bytes / bandwidth)
//   imbalance     slowest / mean rank cost, mean over the sharded batches
//                 (over the batches with media when none shards; 1 when
//                 none has media)
//   gather_mb     mean MB the slowest receiving rank gets per sharded batch
//
// A batch may be empty (its samples text-only, e.g. "grid_thw": [] in a
// manifest): it has nothing to encode, takes the replicated path and adds
// no vision cost, so it counts in batches and as not sharded in
// shard_share; batches_without_media counts them. With no media in any
// batch every speed-up and imbalance is 1 (never 0 / 0).
//
// Repeated media (AnalyzeOptions::media_ids, e.g. the grpo preset's GRPO
// group): the totals count every use and the distinct_* fields each media
// item once (frameshard/dedup.h, keys from the ids by media_unit_keys);
// with AnalyzeOptions::dedup (frame_sharding.dedup) every batch is planned
// over its distinct units, so shard_share, speedup and imbalance describe
// the distinct frames (the replicated run they compare with encodes those
// once too; dedup's own saving is patch_rows / distinct_patch_rows).
//
// Usage:
//   frameshard::AnalyzeOptions o;          // CP 2..64, threshold policy
//   o.plan.policy.enabled = true;
//   frameshard::WorkloadAnalysis a = frameshard::analyze_batches(b, o);
//   a.rows[0].methods[0].speedup;          // CP 2, first partitioner
//
// Pure function, thread-safe.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>

#include <cstdint>
#include <vector>

namespace frameshard {

struct AnalyzeOptions {
  std::vector<int64_t> cps{2, 4, 8, 16, 32, 64};
  std::vector<Partitioner> partitioners = all_partitioners();
  PlanOptions plan;  // world is set per CP size
  /// Per batch, one id per grid row (equal ids: the same media item), or
  /// empty: every row distinct.
  std::vector<std::vector<uint64_t>> media_ids;
  /// Plan each batch over its distinct units (frame_sharding.dedup).
  bool dedup = false;
};

struct MethodSummary {
  Partitioner method = Partitioner::kOptimal;
  double shard_share = 0.0;
  double speedup = 1.0;
  double speedup_gather = 1.0;
  double imbalance = 1.0;
  double gather_mb = 0.0;
};

struct CpSummary {
  int64_t cp = 1;
  std::vector<MethodSummary> methods;  // in AnalyzeOptions::partitioners order
};

struct WorkloadAnalysis {
  int64_t batches = 0;
  int64_t batches_without_media = 0;  // empty grids: text-only samples
  int64_t frame_units = 0;
  int64_t tokens = 0;
  int64_t patch_rows = 0;
  /// Each media item once (equal to the totals without media_ids).
  int64_t distinct_frame_units = 0;
  int64_t distinct_tokens = 0;
  int64_t distinct_patch_rows = 0;
  std::vector<CpSummary> rows;  // in AnalyzeOptions::cps order
};

/// Throws frameshard::Error for no batches, a CP size outside
/// [1, kMaxWorld], a grid make_plan refuses, or media_ids that do not give
/// each batch one id per grid row.
WorkloadAnalysis analyze_batches(
    const std::vector<std::vector<GridThw>>& batches,
    const AnalyzeOptions& options);

}  // namespace frameshard
