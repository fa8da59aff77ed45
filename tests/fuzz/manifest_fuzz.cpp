// Fuzz target: the training data's JSONL manifest
// (frameshard::train::parse_manifest, src/train/manifest.cpp: torch-free, so
// it is compiled into this harness without the train layer). Every input must
// parse or raise frameshard::Error; every parsed grid row is valid for the
// layout; and the dataset reader of analyze and plan --manifest
// (frameshard::parse_media_manifest) must read every input the training
// reader accepts into the same grids and text runs (one reading of
// grid_thw and text_tokens, src/io/manifest_fields.h).
//
// Usage (a -DFRAMESHARD_FUZZ=ON build):
//   build-fuzz/tests/fuzz/manifest_fuzz tests/fuzz/corpus/manifest
//   -max_total_time=30
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/media_manifest.h>
#include <frameshard/train/data_batch.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// The training reader's samples are valid for `layout`.
void check_rows(
    const std::vector<frameshard::train::ManifestSample>& samples,
    const frameshard::MediaLayout& layout) {
  const int64_t merge = layout.spatial_merge_size;
  for (const auto& sample : samples) {
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
}

// The dataset reader accepts what the training reader accepted, alike.
void check_dataset_reader_agrees(
    const std::string& text,
    const std::vector<frameshard::train::ManifestSample>& samples) {
  // qwen2-vl's merge size 2 is the default layout's.
  const frameshard::ProcessorRule& rule =
      frameshard::processor_rule("qwen2-vl");
  std::vector<frameshard::MediaSample> dataset;
  try {
    dataset = frameshard::parse_media_manifest(text, rule, "fuzz.jsonl");
  } catch (const frameshard::Error&) {
    std::abort();
  }
  if (dataset.size() != samples.size()) {
    std::abort();
  }
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (dataset[i].grid != samples[i].grid ||
        dataset[i].text_runs != samples[i].text_runs ||
        dataset[i].text_only() != samples[i].grid.empty()) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const frameshard::MediaLayout layout;
  std::vector<frameshard::train::ManifestSample> samples;
  try {
    samples = frameshard::train::parse_manifest(text, layout, "fuzz.jsonl");
  } catch (const frameshard::Error&) {
    return 0;
  }
  check_rows(samples, layout);
  check_dataset_reader_agrees(text, samples);
  return 0;
}
