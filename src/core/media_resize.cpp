// The Qwen-VL processors' resize and frame-sampling rules, transcribed
// operation by operation from transformers (Python's round() is
// round-half-to-even: std::nearbyint; true division of ints: double).
#include <frameshard/error.h>
#include <frameshard/media_resize.h>

#include <algorithm>
#include <cmath>

namespace frameshard {

namespace {

// Larger sides would overflow t*h*w; no real image comes near.
constexpr int64_t kMaxSide = int64_t{1} << 20;

const std::vector<ProcessorRule>& rules() {
  static const std::vector<ProcessorRule> kRules = [] {
    ProcessorRule q2;  // Qwen2-VL: patch 14, factor 28
    q2.family = "qwen2-vl";
    q2.patch_size = 14;
    q2.image_min_pixels = 3136;
    q2.image_max_pixels = 12845056;
    q2.video_min_pixels = 128 * 28 * 28;
    q2.video_max_pixels = 768 * 28 * 28;
    ProcessorRule q25 = q2;  // Qwen2.5-VL: the same processor
    q25.family = "qwen2.5-vl";
    ProcessorRule q3;  // Qwen3-VL: patch 16, factor 32
    q3.family = "qwen3-vl";
    q3.patch_size = 16;
    q3.image_min_pixels = 65536;
    q3.image_max_pixels = 16777216;
    q3.video_min_pixels = 128 * 32 * 32;
    q3.video_max_pixels = 768 * 32 * 32;
    q3.qwen3_video = true;
    return std::vector<ProcessorRule>{q2, q25, q3};
  }();
  return kRules;
}

void check_sides(const char* fn, int64_t height, int64_t width) {
  FRAMESHARD_CHECK(
      height > 0 && width > 0 && height <= kMaxSide && width <= kMaxSide,
      fn,
      "expected height and width in [1, ",
      kMaxSide,
      "] pixels, got ",
      height,
      " x ",
      width);
  const double ratio = static_cast<double>(std::max(height, width)) /
                       static_cast<double>(std::min(height, width));
  FRAMESHARD_CHECK(
      ratio <= 200.0,
      fn,
      "expected an aspect ratio <= 200 (as the Qwen-VL processors), got ",
      height,
      " x ",
      width);
}

int64_t round_to(double x, int64_t factor) {
  return static_cast<int64_t>(std::nearbyint(x)) * factor;
}

}  // namespace

const ProcessorRule& processor_rule(const std::string& family) {
  for (const ProcessorRule& r : rules()) {
    if (r.family == family) {
      return r;
    }
  }
  detail::fail(
      "processor_rule",
      "expected qwen2-vl, qwen2.5-vl or qwen3-vl, got \"",
      detail::excerpt(family),
      "\"");
}

std::vector<std::string> processor_rule_names() {
  std::vector<std::string> names;
  for (const ProcessorRule& r : rules()) {
    names.push_back(r.family);
  }
  return names;
}

ResizedSize smart_resize(
    int64_t height,
    int64_t width,
    int64_t factor,
    int64_t min_pixels,
    int64_t max_pixels) {
  check_sides("smart_resize", height, width);
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  const double f = static_cast<double>(factor);
  int64_t h_bar = round_to(h / f, factor);
  int64_t w_bar = round_to(w / f, factor);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    h_bar = std::max(
        factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(
        factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

ResizedSize smart_resize_video(
    int64_t frames,
    int64_t height,
    int64_t width,
    int64_t temporal_factor,
    int64_t factor,
    int64_t min_pixels,
    int64_t max_pixels) {
  const char* fn = "smart_resize_video";
  FRAMESHARD_CHECK(
      frames >= temporal_factor,
      fn,
      "expected frames >= the temporal factor ",
      temporal_factor,
      ", got ",
      frames);
  FRAMESHARD_CHECK(
      height > 0 && width > 0,
      fn,
      "expected a positive height and width, got ",
      height,
      " x ",
      width);
  if (height < factor || width < factor) {
    const double scale = std::max(
        static_cast<double>(factor) / static_cast<double>(height),
        static_cast<double>(factor) / static_cast<double>(width));
    height = static_cast<int64_t>(static_cast<double>(height) * scale);
    width = static_cast<int64_t>(static_cast<double>(width) * scale);
  }
  check_sides(fn, height, width);
  const double t = static_cast<double>(frames);
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  const double f = static_cast<double>(factor);
  int64_t h_bar = round_to(h / f, factor);
  int64_t w_bar = round_to(w / f, factor);
  const int64_t t_bar =
      round_to(t / static_cast<double>(temporal_factor), temporal_factor);
  if (t_bar * h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(t * h * w / static_cast<double>(max_pixels));
    h_bar = std::max(
        factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(
        factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (t_bar * h_bar * w_bar < min_pixels) {
    const double beta =
        std::sqrt(static_cast<double>(min_pixels) / (t * h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

int64_t sampled_frames(
    const ProcessorRule& rule, int64_t total_frames, double video_fps) {
  const char* fn = "sampled_frames";
  FRAMESHARD_CHECK(
      total_frames >= 1 && total_frames <= kMaxFrameUnits,
      fn,
      "expected frames in [1, ",
      kMaxFrameUnits,
      "], got ",
      total_frames);
  FRAMESHARD_CHECK(
      std::isfinite(video_fps) && video_fps > 0.0,
      fn,
      "expected fps > 0, got ",
      video_fps);
  const int64_t tp = rule.temporal_patch_size;
  const double wanted =
      static_cast<double>(total_frames) / video_fps * rule.fps;
  int64_t n = 0;
  if (rule.qwen3_video) {
    n = static_cast<int64_t>(std::min(wanted, 9.2e18));  // int(): truncates
    n = std::min({std::max(n, rule.min_frames), rule.max_frames, total_frames});
  } else {
    const int64_t most = std::min(rule.max_frames, total_frames) / tp * tp;
    const double clamped = std::min(
        {std::max(wanted, static_cast<double>(rule.min_frames)),
         static_cast<double>(most),
         static_cast<double>(total_frames)});
    n = static_cast<int64_t>(std::floor(clamped / static_cast<double>(tp))) *
        tp;
    if (n > 0) {
      // transformers takes torch.arange(0, total, total / n): its length is
      // ceil(total / (total / n)) in double, n + 1 when the step rounds down
      // (5509 frames at 25 fps: 441 for n = 440); the padding to the
      // temporal patch then follows from that count.
      const double total = static_cast<double>(total_frames);
      n = static_cast<int64_t>(
          std::ceil(total / (total / static_cast<double>(n))));
    }
  }
  FRAMESHARD_CHECK(
      n >= tp,
      fn,
      "expected a video that samples at least ",
      tp,
      " frames, got ",
      total_frames,
      " frames at ",
      video_fps,
      " fps (",
      n,
      " sampled)");
  return n;
}

GridThw image_grid(const ProcessorRule& rule, int64_t height, int64_t width) {
  const ResizedSize s = smart_resize(
      height,
      width,
      rule.factor(),
      rule.image_min_pixels,
      rule.image_max_pixels);
  return {1, s.height / rule.patch_size, s.width / rule.patch_size};
}

GridThw video_grid(
    const ProcessorRule& rule,
    int64_t total_frames,
    double video_fps,
    int64_t height,
    int64_t width) {
  const int64_t n = sampled_frames(rule, total_frames, video_fps);
  const int64_t tp = rule.temporal_patch_size;
  const ResizedSize s = rule.qwen3_video ? smart_resize_video(
                                               n,
                                               height,
                                               width,
                                               tp,
                                               rule.factor(),
                                               rule.video_min_pixels,
                                               rule.video_max_pixels)
                                         : smart_resize(
                                               height,
                                               width,
                                               rule.factor(),
                                               rule.video_min_pixels,
                                               rule.video_max_pixels);
  return {
      (n + tp - 1) / tp, s.height / rule.patch_size, s.width / rule.patch_size};
}

}  // namespace frameshard
