// Fuzz target: workload JSON (frameshard::parse_workload), the input of
// `frameshard plan/encode/verify --workload`. Every input must parse or raise
// frameshard::Error; what parses round-trips through to_json and expands into
// frame units (the limits hold before anything is sized by the input).
//
// Usage (a -DFRAMESHARD_FUZZ=ON build):
//   build-fuzz/tests/fuzz/workload_fuzz tests/fuzz/corpus/workload
//   -max_total_time=30
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/workload.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  frameshard::Workload workload;
  try {
    workload = frameshard::parse_workload(text, "fuzz.json");
  } catch (const frameshard::Error&) {
    return 0;
  }
  const frameshard::Workload again =
      frameshard::parse_workload(frameshard::to_json(workload), "again");
  if (again.grid != workload.grid || again.media_ids != workload.media_ids ||
      again.layout.spatial_merge_size != workload.layout.spatial_merge_size ||
      again.layout.temporal_patch_size != workload.layout.temporal_patch_size) {
    std::abort();
  }
  try {
    frameshard::expand_frames(workload.grid, workload.layout);
  } catch (const frameshard::Error&) {
    // A valid file may still hold rows a layout refuses (h not divisible by
    // the merge size): a clear error is the contract.
  }
  return 0;
}
