// Content keys of frame units (frameshard/runtime/frame_keys.h).
#include <frameshard/error.h>
#include <frameshard/runtime/frame_keys.h>
#include <frameshard/splitmix64.h>
#include <frameshard/tower.h>

#include "runtime/frame_key_sums.h"

#include <cstdint>

namespace frameshard {

std::vector<UnitKey> frame_keys(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const MediaLayout& layout) {
  FRAMESHARD_CHECK(
      pixel_values.defined() && pixel_values.dim() == 2,
      "frame_keys",
      "expected pixel_values to be a 2-D [patch_rows, features] tensor, got ",
      pixel_values.defined() ? pixel_values.dim() : -1,
      " dims");
  const FrameSet fs = expand_frames(grid_from_tensor(grid_thw), layout);
  check_pixel_rows(fs, pixel_values.size(0));
  std::vector<UnitKey> keys(fs.units.size());
  if (fs.units.empty()) {
    return keys;
  }
  // One pass over the bytes on the CPU; tensor ops on another device.
  // The same bits either way (runtime/frame_key_sums.h).
  const std::vector<internal::LaneSums> lanes =
      pixel_values.device().is_cpu()
          ? internal::unit_lane_sums_cpu(pixel_values, fs)
          : internal::unit_lane_sums_tensor(pixel_values, fs);
  const int64_t features = pixel_values.size(1);
  const uint64_t shape_salt = mix64(
      static_cast<uint64_t>(features) * 0x100 +
      static_cast<uint64_t>(pixel_values.scalar_type()));
  for (size_t u = 0; u < fs.units.size(); ++u) {
    const uint64_t shape = mix64(
        shape_salt ^ mix64(
                         static_cast<uint64_t>(fs.units[u].h) << 32 |
                         static_cast<uint64_t>(fs.units[u].w)));
    keys[u] = {mix64(lanes[u][0] ^ shape), mix64(lanes[u][1] + shape)};
  }
  return keys;
}

}  // namespace frameshard
