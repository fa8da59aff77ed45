// What `frameshard analyze` prints: the table, the one JSON object of
// --json and the SVG plot of --plot (speed-up with the gather against CP
// size, one line per partitioner, and the ideal CP-fold line). Text-only
// samples and the batches without media they make are counted in each
// (text_only_samples, batches_without_media).
//
// Usage:
//   AnalyzeContext ctx{"m.jsonl", "qwen2-vl", ...};
//   print_analysis(std::cout, ctx, analysis);
//   nlohmann::json j = analysis_json(ctx, analysis);
//   std::string svg = analysis_svg(ctx, analysis);
#pragma once

#include <frameshard/analyze.h>

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace frameshard {
namespace cli {

struct AnalyzeContext {
  std::string manifest;
  std::string preset;  // analyze --preset instead of a manifest
  uint64_t seed = 0;   // the first batch's seed (--preset)
  std::string family;
  int64_t samples = 0;
  int64_t samples_per_batch = 1;
  int64_t images = 0;
  int64_t videos = 0;
  int64_t grid_rows = 0;          // media given as grid_thw rows
  int64_t text_only_samples = 0;  // samples without media
  PlanOptions plan;               // the policy and cost model used
  bool dedup = false;  // frame_sharding.dedup: planned the distinct units
};

void print_analysis(
    std::ostream& os, const AnalyzeContext& ctx, const WorkloadAnalysis& a);

nlohmann::json analysis_json(
    const AnalyzeContext& ctx, const WorkloadAnalysis& a);

std::string analysis_svg(const AnalyzeContext& ctx, const WorkloadAnalysis& a);

}  // namespace cli
}  // namespace frameshard
