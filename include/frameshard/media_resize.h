// File: frameshard/media_resize.h
//
// From media sizes in pixels to grid_thw, by the rules of the Qwen-VL
// processors in `transformers` (checked against them on random sizes by
// tests/python/test_media_resize.py):
//
//   smart_resize (images; Qwen2/2.5-VL videos, per frame): round h and w to
//     multiples of factor = patch * merge (28 for patch 14, 32 for patch
//     16); if the area exceeds max_pixels scale down (floor), if it is
//     below min_pixels scale up (ceil), keeping the aspect ratio; an
//     aspect ratio above 200 is refused.
//   smart_resize_video (Qwen3-VL videos): the same on t*h*w, with the
//     frame count rounded to the temporal factor, and sides below the
//     factor first scaled up to it.
//   sampled_frames: frames taken from a video of `total` frames at
//     `video_fps`, sampling `rule.fps` per second (Qwen2-VL: clamped to
//     [min_frames, min(max_frames, total) floored to the temporal patch],
//     then floored to it, then the length of transformers'
//     arange(0, total, total / n), which is n + 1 when that step rounds
//     down; Qwen3-VL: int(total / video_fps * fps) clamped to
//     [min_frames, min(max_frames, total)]).
//   grid = (ceil(frames / temporal_patch), h / patch, w / patch); an image
//     is one frame repeated to the temporal patch, t = 1.
//
// Defaults (processor_rule): Qwen2-VL and Qwen2.5-VL images 3136 ..
// 12845056 pixels (their checkpoints' preprocessor_config.json), videos
// 128*28*28 .. 768*28*28 per frame; Qwen3-VL images 65536 .. 16777216
// (its checkpoints), videos 128*32*32 .. 768*32*32 over t*h*w (the
// transformers class defaults); fps 2, min_frames 4, max_frames 768.
//
// Usage:
//   const auto& rule = frameshard::processor_rule("qwen2-vl");
//   frameshard::GridThw g = frameshard::image_grid(rule, 1080, 1920);
//   // g == {1, 78, 138}: 1092 x 1932 pixels
//   frameshard::GridThw v = frameshard::video_grid(rule, 300, 30.0, 480,
//                                                  640);  // 10 s at 30 fps
//   // v.t == 10: 20 frames sampled at 2 fps
//
// Pure functions, thread-safe.
#pragma once

#include <frameshard/frames.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

struct ProcessorRule {
  std::string family;  // qwen2-vl | qwen2.5-vl | qwen3-vl
  int64_t patch_size = 14;
  int64_t merge_size = 2;
  int64_t temporal_patch_size = 2;
  int64_t image_min_pixels = 56 * 56;
  int64_t image_max_pixels = 28 * 28 * 16384;
  int64_t video_min_pixels = 128 * 28 * 28;
  int64_t video_max_pixels = 768 * 28 * 28;
  double fps = 2.0;  // frames sampled per second of video
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  // Qwen3-VL: video_max_pixels bounds t*h*w and frames sample by int().
  bool qwen3_video = false;

  int64_t factor() const {
    return patch_size * merge_size;
  }
};

/// The rule of "qwen2-vl", "qwen2.5-vl" or "qwen3-vl" (defaults in the
/// banner); frameshard::Error listing the names otherwise.
const ProcessorRule& processor_rule(const std::string& family);
std::vector<std::string> processor_rule_names();

/// Resized height and width in pixels.
struct ResizedSize {
  int64_t height = 0;
  int64_t width = 0;
};

ResizedSize smart_resize(
    int64_t height,
    int64_t width,
    int64_t factor,
    int64_t min_pixels,
    int64_t max_pixels);

ResizedSize smart_resize_video(
    int64_t frames,
    int64_t height,
    int64_t width,
    int64_t temporal_factor,
    int64_t factor,
    int64_t min_pixels,
    int64_t max_pixels);

/// Frames sampled from a video (banner); throws when fewer than the
/// temporal patch would remain.
int64_t sampled_frames(
    const ProcessorRule& rule, int64_t total_frames, double video_fps);

GridThw image_grid(const ProcessorRule& rule, int64_t height, int64_t width);

GridThw video_grid(
    const ProcessorRule& rule,
    int64_t total_frames,
    double video_fps,
    int64_t height,
    int64_t width);

}  // namespace frameshard
