// One batch of a manifest's samples for `frameshard plan --manifest`
// (tools/manifest_batch.h).
#include "manifest_batch.h"

#include <frameshard/error.h>
#include <frameshard/media_manifest.h>
#include <frameshard/media_resize.h>

#include <vector>

namespace frameshard {
namespace cli {

ManifestBatch load_manifest_batch(
    const std::string& path,
    const std::string& family,
    int64_t first,
    int64_t count) {
  const ProcessorRule& rule = processor_rule(family);
  const std::vector<MediaSample> samples = load_media_manifest(path, rule);
  const auto n = static_cast<int64_t>(samples.size());
  // Refused rather than cut short or wrapped: a plan of other samples than
  // the ones asked for would look like an answer about them.
  if (first < 0 || count < 1 || first >= n || count > n - first) {
    detail::fail(
        "plan",
        "--sample ",
        first,
        " --samples ",
        count,
        ": expected samples within the manifest's ",
        n,
        " (indices 0 to ",
        n - 1,
        "), got indices ",
        first,
        " to ",
        first + count - 1);
  }
  ManifestBatch b;
  b.workload.name = path;
  b.workload.layout = MediaLayout{rule.merge_size, rule.temporal_patch_size};
  b.family = family;
  b.first = first;
  b.count = count;
  b.manifest_samples = n;
  for (int64_t i = first; i < first + count; ++i) {
    const MediaSample& s = samples[static_cast<std::size_t>(i)];
    b.workload.grid.insert(b.workload.grid.end(), s.grid.begin(), s.grid.end());
    b.text_only += s.text_only() ? 1 : 0;
    b.text_tokens += s.text_tokens();
  }
  return b;
}

std::string manifest_origin(const ManifestBatch& batch) {
  std::string out = "manifest samples " + std::to_string(batch.first) + " to " +
                    std::to_string(batch.first + batch.count - 1) + " of " +
                    std::to_string(batch.manifest_samples);
  if (batch.text_only > 0) {
    out += ", " + std::to_string(batch.text_only) + " text-only";
  }
  return out + ", " + batch.family + " processor";
}

nlohmann::json manifest_json(const ManifestBatch& batch) {
  return {
      {"path", batch.workload.name},
      {"family", batch.family},
      {"first_sample", batch.first},
      {"samples", batch.count},
      {"manifest_samples", batch.manifest_samples},
      {"text_only_samples", batch.text_only},
      {"text_tokens", batch.text_tokens}};
}

}  // namespace cli
}  // namespace frameshard
