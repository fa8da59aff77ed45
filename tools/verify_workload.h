// The workload `frameshard verify` runs: a file, a preset or the built-in
// one, validated as given, then scaled down so that it finishes in seconds
// on a CPU. Presets have frames of up to 65k patches, far beyond what a CPU
// can attend over quickly, so h and w are divided by the smallest integer S
// (h -> merge * ceil(h / merge / S)) that brings the largest frame to
// <= max_frame_patches and the total to <= max_patches; a given scale forces
// S (1: as given). Frame counts, order and media structure are kept.
//
// Usage:
//   WorkloadRequest req;
//   req.preset = "mixed";
//   ResolvedWorkload r = resolve_workload(req);   // frameshard::Error if bad
//   std::cout << r.display_label();  // "preset mixed (seed 0), h and w ..."
#pragma once

#include <frameshard/workload.h>

#include <cstdint>
#include <string>

namespace frameshard {
namespace cli {

struct WorkloadRequest {
  std::string file;    // --workload
  std::string preset;  // --preset (neither: the built-in workload)
  uint64_t seed = 0;
  int64_t scale = 0;  // 0: automatic
  int64_t max_frame_patches = 1024;
  int64_t max_patches = 16384;
};

struct ResolvedWorkload {
  Workload workload;  // scaled
  std::string label;  // what the user asked for
  int64_t scale = 1;
  int64_t original_patches = 0;

  /// The label, plus how it was scaled when S > 1.
  std::string display_label() const;
};

/// Loads, validates and scales the requested workload (frameshard::Error
/// naming the problem).
ResolvedWorkload resolve_workload(const WorkloadRequest& request);

}  // namespace cli
}  // namespace frameshard
