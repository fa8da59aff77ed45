// `frameshard verify`'s workload: resolution and scaling (see the header).

#include "verify_workload.h"

#include <frameshard/error.h>
#include <frameshard/frames.h>

#include <algorithm>

namespace frameshard {
namespace cli {
namespace {

// The default workload: small, but with every case that matters: an image,
// videos whose units spread over ranks, frames of different sizes.
Workload builtin_workload() {
  Workload wl;
  wl.name = "builtin";
  wl.grid = {{1, 8, 12}, {4, 4, 4}, {1, 4, 8}, {3, 6, 4}, {1, 2, 2}, {2, 8, 8}};
  return wl;
}

struct Sizes {
  int64_t max_frame = 0;
  int64_t total = 0;
};
Sizes workload_sizes(const Workload& wl) {
  Sizes s;
  for (const auto& g : wl.grid) {
    s.max_frame = std::max(s.max_frame, g.h * g.w);
    s.total += g.patches();
  }
  return s;
}

// The smallest factor that brings the largest frame to <= max_frame_patches
// and the total to <= max_patches (0 = no limit); stops when every frame is
// already merge x merge.
int64_t auto_scale(const Workload& wl, const WorkloadRequest& r) {
  const int64_t m = wl.layout.spatial_merge_size;
  int64_t limit = 1;
  for (const auto& g : wl.grid) {
    limit = std::max({limit, g.h / m, g.w / m});
  }
  for (int64_t s = 1; s < limit; ++s) {
    const Sizes z = workload_sizes(scale_workload(wl, s));
    if ((r.max_frame_patches == 0 || z.max_frame <= r.max_frame_patches) &&
        (r.max_patches == 0 || z.total <= r.max_patches)) {
      return s;
    }
  }
  return limit;
}

}  // namespace

std::string ResolvedWorkload::display_label() const {
  if (scale <= 1) {
    return label;
  }
  return label + ", h and w scaled down " + std::to_string(scale) + "x (" +
         std::to_string(original_patches) + " -> " +
         std::to_string(workload_sizes(workload).total) + " patch rows)";
}

ResolvedWorkload resolve_workload(const WorkloadRequest& request) {
  ResolvedWorkload r;
  Workload wl;
  if (!request.file.empty()) {
    wl = load_workload(request.file);
    r.label = "file " + request.file;
  } else if (!request.preset.empty()) {
    wl = preset_workload(request.preset, request.seed);
    r.label = "preset " + request.preset + " (seed " +
              std::to_string(request.seed) + ")";
  } else {
    wl = builtin_workload();
    r.label = "builtin";
  }
  // Validate the workload as given, so errors name the user's rows.
  const FrameSet frames = expand_frames(wl.grid, wl.layout);
  FRAMESHARD_CHECK(
      !frames.units.empty(),
      "verify",
      "expected a workload with at least one frame, got none");
  r.original_patches = frames.total_patch_rows;
  FRAMESHARD_CHECK(
      request.scale >= 0,
      "verify",
      "expected --scale >= 0, got ",
      request.scale);
  r.scale = request.scale > 0 ? request.scale : auto_scale(wl, request);
  r.workload = scale_workload(wl, r.scale);
  return r;
}

}  // namespace cli
}  // namespace frameshard
