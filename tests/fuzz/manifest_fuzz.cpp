// Fuzz target: the training data's JSONL manifest
// (frameshard::train::parse_manifest, src/train/manifest.cpp: torch-free, so
// it is compiled into this harness without the train layer). Every input must
// parse or raise frameshard::Error; every parsed grid row is valid for the
// layout.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build):
//   build-fuzz/tests/fuzz/manifest_fuzz tests/fuzz/corpus/manifest
//   -max_total_time=30
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/train/data_batch.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const frameshard::MediaLayout layout;
  try {
    for (const auto& sample :
         frameshard::train::parse_manifest(text, layout, "fuzz.jsonl")) {
      const int64_t merge = layout.spatial_merge_size;
      for (const auto& row : sample.grid) {
        if (row.t < 1 || row.h < 1 || row.w < 1 || row.h % merge != 0 ||
            row.w % merge != 0) {
          std::abort();
        }
      }
      if (!sample.text_runs.empty() &&
          sample.text_runs.size() != sample.grid.size() + 1) {
        std::abort();
      }
    }
  } catch (const frameshard::Error&) {
  }
  return 0;
}
