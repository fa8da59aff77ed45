// The batch `frameshard plan --manifest` plans: samples [first, first +
// count) of a training or dataset manifest (frameshard/media_manifest.h,
// read with the --family processor rule, as `analyze` reads it), their media
// in order as one batch with the family's layout. Text-only samples add no
// media, so a batch of only text-only samples has an empty grid: the plan
// takes the replicated path with nothing to encode ("no media").
//
// Usage:
//   ManifestBatch b = load_manifest_batch("pages_or_text.jsonl", "qwen3-vl",
//                                         1, 1);
//   b.workload.grid.empty();  // true: sample 1 is text-only
//   manifest_origin(b);       // "manifest samples 1 to 1 of 2, 1
//                             // text-only, qwen3-vl processor"
#pragma once

#include <frameshard/workload.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace frameshard {
namespace cli {

struct ManifestBatch {
  Workload workload;  // name: the manifest's path; grid: the samples' media
  std::string family;
  int64_t first = 0;             // index of the first sample planned
  int64_t count = 0;             // samples planned
  int64_t manifest_samples = 0;  // samples in the file
  int64_t text_only = 0;         // planned samples without media
  int64_t text_tokens = 0;       // text tokens the planned samples give
};

/// Throws frameshard::Error for a manifest error (file, line and field
/// named) or samples beyond the manifest's end.
ManifestBatch load_manifest_batch(
    const std::string& path,
    const std::string& family,
    int64_t first,
    int64_t count);

/// The workload's origin in plan's report: which samples, how many of them
/// text-only, which processor.
std::string manifest_origin(const ManifestBatch& batch);

/// plan --json's "manifest" object.
nlohmann::json manifest_json(const ManifestBatch& batch);

}  // namespace cli
}  // namespace frameshard
