// Workloads: seeded synthetic presets (JSON files: workload_json.cpp).
//
// The presets model one microbatch of one CP group (a packed sequence of a
// few samples), sized after Qwen's processor budgets:
//   doc    8 to 16 samples, one image each, 2,048 to 65,536 patches
//          (log-uniform, as InfoVQA-style documents span that range)
//   multi  8 samples of 2 to 8 images, 1,024 to 5,120 patches each
//          (log-uniform; Mantis-style interleaved images)
//   video  1 or 2 videos of 16 to 768 frames (log-uniform, even), one
//          temporal unit per 2 frames, 512 to 3,072 patches per unit,
//          capped by Qwen's total video budget (VIDEO_TOTAL_PIXELS =
//          128000*28^2*0.9 shared by the frames, about 460,800 patches per
//          video, never below 1.05 * VIDEO_MIN_PIXELS = 537 patches a unit)
//   mixed  1 or 2 huge images (8,192 to 16,384 patches, i.e. about 1.3k to
//          1.8k pixels square) placed at random positions among 128 to 512
//          small frames (256 to 1,024 patches: 224^2 to 448^2 video frames),
//          which come as short videos (2 to 16 units) and single images.
//          Sized so no single image exceeds a rank's fair share at cp 4: the
//          case where the cost model and the partitioner decide the balance
//   grpo   one GRPO group (verl / AReaL sample every prompt G times, and
//          each sample carries the prompt's images): a prompt drawn like
//          mixed with an eighth of its small frames (16 to 64 units) and one
//          huge image, so the group is about one mixed microbatch, from the
//          grpo stream,
//          its rows repeated kGrpoPresetGroupSize times, media_ids saying
//          which rows are the same item
// Image shapes draw an aspect ratio w/h log-uniform in [0.5, 2] and round
// to multiples of the merge size; the realized patch count stays inside the
// preset's range. Everything uses integer arithmetic on a splitmix64 stream
// (no libm, no std::*_distribution), so every platform draws the same
// grids.
#include <frameshard/splitmix64.h>
#include <frameshard/workload.h>

#include <frameshard/error.h>

#include <algorithm>
#include <cmath>

namespace frameshard {
namespace {

// 2^(2^-i) in Q30 fixed point, i = 1..16.
constexpr uint64_t kExp2Q30[16] = {
    1518500250,
    1276901417,
    1170923762,
    1121280436,
    1097253708,
    1085434106,
    1079572136,
    1076653033,
    1075196443,
    1074468888,
    1074105294,
    1073923544,
    1073832680,
    1073787251,
    1073764537,
    1073753181};

/// 2^(f / 65536) in Q30 for f in [0, 65536): a product of the factors of
/// the set bits of f, exact integer arithmetic.
uint64_t exp2_frac_q30(uint64_t f) {
  uint64_t r = uint64_t{1} << 30;
  for (int i = 0; i < 16; ++i) {
    if (f & (uint64_t{1} << (15 - i))) {
      r = (r * kExp2Q30[i]) >> 30;
    }
  }
  return r;
}

int64_t isqrt(int64_t n) {
  if (n <= 0) {
    return 0;
  }
  auto r = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (r * r > n) {
    --r;
  }
  while ((r + 1) * (r + 1) <= n) {
    ++r;
  }
  return r;
}

/// Log-uniform integer in [lo, hi] (1 <= lo <= hi): an exponent drawn
/// uniformly on a 1/65536-octave grid over the smallest power-of-two range
/// that covers [lo, hi], rejecting draws above hi.
int64_t log_uniform(SplitMix64& rng, int64_t lo, int64_t hi) {
  if (lo >= hi) {
    return lo;
  }
  int octaves = 0;
  while ((lo << octaves) < hi) {
    ++octaves;
  }
  while (true) {
    const uint64_t x = rng.below(static_cast<uint64_t>(octaves) << 16);
    const auto v = static_cast<int64_t>(
        (static_cast<uint64_t>(lo << (x >> 16)) * exp2_frac_q30(x & 0xffff)) >>
        30);
    if (v >= lo && v <= hi) {
      return v;
    }
  }
}

/// (h, w) in patches, multiples of `merge`, about `patches` in total with
/// an aspect ratio w/h log-uniform in [0.5, 2]; h*w stays in [lo, hi].
std::pair<int64_t, int64_t> draw_shape(
    SplitMix64& rng, int64_t patches, int64_t lo, int64_t hi, int64_t merge) {
  const int64_t cell = merge * merge;
  const int64_t tokens = std::max<int64_t>(1, patches / cell);
  // aspect = 2^(e - 1), e uniform in [0, 2): Q30 value in [2^29, 2^31).
  const uint64_t e = rng.below(uint64_t{2} << 16);
  const uint64_t aspect_q30 =
      (e >= (uint64_t{1} << 16) ? 2 * exp2_frac_q30(e - (uint64_t{1} << 16))
                                : exp2_frac_q30(e)) >>
      1;
  // hm = round(sqrt(tokens / aspect)) in merged cells.
  const int64_t twice = isqrt(
      static_cast<int64_t>((static_cast<uint64_t>(tokens) << 32) / aspect_q30));
  int64_t hm = std::max<int64_t>(1, (twice + 1) / 2);
  int64_t wm = std::max<int64_t>(1, (tokens + hm / 2) / hm);
  wm = std::min(wm, 2 * hm);
  wm = std::max(wm, (hm + 1) / 2);
  // Rounding can leave the range at its edges: nudge the width back in.
  while (cell * hm * wm < lo) {
    ++wm;
  }
  while (wm > 1 && cell * hm * wm > hi) {
    --wm;
  }
  return {merge * hm, merge * wm};
}

uint64_t name_salt(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char ch : name) {
    h = (h ^ ch) * 0x100000001b3ULL;
  }
  return h;
}

// One image of lo to hi patches (log-uniform), its shape drawn after.
GridThw draw_image(
    SplitMix64& rng, int64_t lo, int64_t hi, const MediaLayout& layout) {
  const int64_t p = log_uniform(rng, lo, hi);
  const auto hw = draw_shape(rng, p, lo, hi, layout.spatial_merge_size);
  return {1, hw.first, hw.second};
}

Workload make_doc(SplitMix64& rng, const MediaLayout& layout) {
  Workload wl;
  const int64_t samples = rng.uniform(8, 16);
  for (int64_t s = 0; s < samples; ++s) {
    wl.grid.push_back(draw_image(rng, 2048, 65536, layout));
  }
  return wl;
}

Workload make_multi(SplitMix64& rng, const MediaLayout& layout) {
  Workload wl;
  for (int s = 0; s < 8; ++s) {
    const int64_t images = rng.uniform(2, 8);
    for (int64_t i = 0; i < images; ++i) {
      wl.grid.push_back(draw_image(rng, 1024, 5120, layout));
    }
  }
  return wl;
}

Workload make_video(SplitMix64& rng, const MediaLayout& layout) {
  // Qwen's video budget in patches of 14x14 pixels.
  constexpr int64_t kTotalPixels = 128000LL * 28 * 28 * 9 / 10;
  constexpr int64_t kMinUnitPatches = 538;  // 1.05 * 128 * 28^2 / 14^2
  Workload wl;
  const int64_t videos = rng.uniform(1, 2);
  for (int64_t v = 0; v < videos; ++v) {
    const int64_t frames = 2 * log_uniform(rng, 8, 384);
    const int64_t t = frames / layout.temporal_patch_size;
    const int64_t budget = 2 * kTotalPixels / (frames * 196);
    const int64_t cap =
        std::max<int64_t>(std::min<int64_t>(3072, budget), kMinUnitPatches);
    const int64_t p = log_uniform(rng, 512, cap);
    const auto hw = draw_shape(rng, p, 512, cap, layout.spatial_merge_size);
    wl.grid.push_back({t, hw.first, hw.second});
  }
  return wl;
}

// The mixed draws: small_lo to small_hi small frame units and 1 to
// huge_hi huge images (the grpo prompt draws fewer of both).
Workload make_mixed(
    SplitMix64& rng,
    const MediaLayout& layout,
    int64_t small_lo = 128,
    int64_t small_hi = 512,
    int64_t huge_hi = 2) {
  Workload wl;
  const int64_t target = rng.uniform(small_lo, small_hi);
  int64_t small = 0;
  while (small < target) {
    GridThw g = draw_image(rng, 256, 1024, layout);
    if (rng.below(2) == 0) {  // a short video, else a single image
      g.t = std::min(rng.uniform(2, 16), target - small);
    }
    wl.grid.push_back(g);
    small += g.t;
  }
  const int64_t huge = rng.uniform(1, huge_hi);
  for (int64_t i = 0; i < huge; ++i) {
    const GridThw g = draw_image(rng, 8192, 16384, layout);
    const auto pos = static_cast<std::ptrdiff_t>(rng.below(wl.grid.size() + 1));
    wl.grid.insert(wl.grid.begin() + pos, g);
  }
  return wl;
}

// A grpo prompt: mixed with an eighth of its small frames and one huge
// image, so a group of kGrpoPresetGroupSize samples packs about the rows
// and tokens of one mixed microbatch.
Workload make_grpo_prompt(SplitMix64& rng, const MediaLayout& layout) {
  return make_mixed(
      rng,
      layout,
      128 / kGrpoPresetGroupSize,
      512 / kGrpoPresetGroupSize,
      /*huge_hi=*/1);
}

// A prompt's media, then the same rows for each further sample of its
// group; row i of every copy has id i.
Workload make_grpo(SplitMix64& rng, const MediaLayout& layout) {
  const Workload prompt = make_grpo_prompt(rng, layout);
  Workload wl;
  for (int64_t c = 0; c < kGrpoPresetGroupSize; ++c) {
    wl.grid.insert(wl.grid.end(), prompt.grid.begin(), prompt.grid.end());
    for (std::size_t i = 0; i < prompt.grid.size(); ++i) {
      wl.media_ids.push_back(static_cast<uint64_t>(i));
    }
  }
  return wl;
}

}  // namespace

std::vector<std::string> workload_preset_names() {
  return {"doc", "multi", "video", "mixed", "grpo"};
}

Workload grpo_prompt_workload(uint64_t seed) {
  SplitMix64 rng(seed ^ name_salt("grpo"));
  Workload wl = make_grpo_prompt(rng, MediaLayout{});
  wl.name = "grpo";
  return wl;
}

Workload preset_workload(const std::string& name, uint64_t seed) {
  // The name salts the stream so presets with one seed are independent.
  SplitMix64 rng(seed ^ name_salt(name));
  const MediaLayout layout;
  Workload wl;
  if (name == "doc") {
    wl = make_doc(rng, layout);
  } else if (name == "multi") {
    wl = make_multi(rng, layout);
  } else if (name == "video") {
    wl = make_video(rng, layout);
  } else if (name == "mixed") {
    wl = make_mixed(rng, layout);
  } else if (name == "grpo") {
    wl = make_grpo(rng, layout);
  } else {
    std::string names;
    for (const auto& n : workload_preset_names()) {
      names += (names.empty() ? "" : ", ") + n;
    }
    detail::fail("preset_workload", "expected one of ", names, ", got ", name);
  }
  wl.name = name;
  wl.layout = layout;
  return wl;
}

std::vector<UnitKey> media_id_unit_keys(
    const std::vector<GridThw>& grid,
    const std::vector<uint64_t>& ids,
    const MediaLayout& layout) {
  FRAMESHARD_CHECK(
      ids.size() == grid.size(),
      "media_id_unit_keys",
      "expected one media id per grid_thw row (",
      grid.size(),
      "), got ",
      ids.size());
  std::vector<UnitKey> keys;
  keys.reserve(ids.size());
  for (uint64_t id : ids) {
    // Two draws of one stream: independent 64-bit lanes of the key.
    SplitMix64 mix(id ^ 0x6d656469615f6964ULL);  // "media_id"
    const uint64_t hi = mix.next();
    keys.push_back({hi, mix.next()});
  }
  return media_unit_keys(grid, keys, layout);
}

Workload scale_workload(const Workload& workload, int64_t scale) {
  FRAMESHARD_CHECK(
      scale >= 1, "scale_workload", "expected a scale >= 1, got ", scale);
  const int64_t m = workload.layout.spatial_merge_size;
  FRAMESHARD_CHECK(
      m >= 1,
      "scale_workload",
      "expected a positive spatial_merge_size, got ",
      m);
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  Workload out = workload;
  for (GridThw& g : out.grid) {
    g.h = m * ceil_div(ceil_div(g.h, m), scale);
    g.w = m * ceil_div(ceil_div(g.w, m), scale);
  }
  return out;
}

}  // namespace frameshard
