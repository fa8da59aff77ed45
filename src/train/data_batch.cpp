// One step's token layout (data_batch.h): synthetic batches from the seeded
// presets and packed manifest samples share one builder, so both follow the
// same layout and label rules.
#include <frameshard/train/data_batch.h>

#include <frameshard/error.h>
#include <frameshard/splitmix64.h>
#include <frameshard/workload.h>

#include <algorithm>
#include <map>

namespace frameshard {
namespace train {
namespace {

// One SplitMix64 step per input, so neighbouring steps and ranks get
// unrelated streams (a plain sum would make (step 1, rank 0) and (step 0,
// rank 1) collide).
uint64_t step_seed(int64_t seed, int64_t step, int64_t dp_rank) {
  uint64_t s = SplitMix64(static_cast<uint64_t>(seed)).next();
  s = SplitMix64(s ^ static_cast<uint64_t>(step)).next();
  return SplitMix64(
             s ^ (static_cast<uint64_t>(dp_rank) * 0x9e3779b97f4a7c15ULL))
      .next();
}

// Salts the text stream away from the preset's own draw of the same seed.
constexpr uint64_t kTextSalt = 0x74657874ULL;  // "text"
// Salt a grpo prompt's draw away from the mixed preset's batches, and its
// media's pixel seeds away from the prompt's.
constexpr uint64_t kPromptSalt = 0x70726f6d7074ULL;  // "prompt"
constexpr uint64_t kPixelSalt = 0x706978656c73ULL;   // "pixels"

// The seed of grpo prompt p of a step (p = 0 .. dp_size - 1).
uint64_t prompt_seed(int64_t seed, int64_t step, int64_t prompt) {
  return SplitMix64(step_seed(seed, step, prompt) ^ kPromptSalt).next();
}

// The pixel seed of medium m of a prompt: one per (prompt, medium), so
// every sample of the prompt draws the same rows.
uint64_t media_seed(uint64_t prompt, int64_t m) {
  return SplitMix64(
             prompt ^ kPixelSalt ^
             (static_cast<uint64_t>(m) * 0xbf58476d1ce4e5b9ULL))
      .next();
}

// Learnable text (see the banner): + 1 within a run, random restarts.
class TextStream {
 public:
  TextStream(uint64_t seed, int64_t vocab_size)
      : rng_(seed), ids_(static_cast<uint64_t>(vocab_size - kFirstTextToken)) {}

  int64_t next(bool run_start) {
    if (run_start || rng_.below(4) == 0) {
      last_ = rng_.below(ids_);
    } else {
      last_ = (last_ + 1) % ids_;
    }
    return kFirstTextToken + static_cast<int64_t>(last_);
  }

 private:
  SplitMix64 rng_;
  uint64_t ids_;
  uint64_t last_ = 0;
};

// The text stream of one (step, replica), salted away from its preset draw.
uint64_t text_seed(const DataConfig& data, const BatchRequest& r) {
  return step_seed(data.seed, r.step, r.dp_rank) ^ kTextSalt;
}

void check_common(
    const char* fn, const DataConfig& data, const BatchRequest& r) {
  FRAMESHARD_CHECK(
      r.vocab_size > kFirstTextToken,
      fn,
      "expected vocab_size >= ",
      kFirstTextToken + 1,
      " (ids below ",
      kFirstTextToken,
      " are padding and media), got ",
      r.vocab_size);
  FRAMESHARD_CHECK(
      r.pad_multiple >= 1,
      fn,
      "expected pad_multiple >= 1, got ",
      r.pad_multiple);
  FRAMESHARD_CHECK(r.step >= 0, fn, "expected step >= 0, got ", r.step);
  FRAMESHARD_CHECK(
      r.dp_rank >= 0, fn, "expected dp_rank >= 0, got ", r.dp_rank);
  FRAMESHARD_CHECK(
      data.scale >= 1,
      fn,
      "data.scale: expected a positive integer, got ",
      data.scale);
}

// The sources that place replicas by dp_size (grpo, manifests) need it.
void check_dp_size(const char* fn, const BatchRequest& r) {
  FRAMESHARD_CHECK(
      r.dp_size >= 1 && r.dp_rank < r.dp_size,
      fn,
      "expected 0 <= dp_rank < dp_size, got dp_rank ",
      r.dp_rank,
      " and dp_size ",
      r.dp_size);
}

// The sequence: text_runs[i] text tokens, medium i, ..., text_runs.back()
// text tokens, then padding; labels by the banner's rule.
BatchLayout build_layout(
    const char* fn,
    std::vector<GridThw> grid,
    const std::vector<int64_t>& text_runs,
    const MediaLayout& layout,
    const BatchRequest& r,
    uint64_t text_seed) {
  expand_frames(grid, layout);  // validates the rows against the layout
  const int64_t cell = layout.spatial_merge_size * layout.spatial_merge_size;
  BatchLayout b;
  TextStream text(text_seed, r.vocab_size);
  auto add_text = [&](int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      b.tokens.push_back(text.next(k == 0));
    }
    b.text_tokens += n;
  };
  for (std::size_t i = 0; i < grid.size(); ++i) {
    add_text(text_runs[i]);
    b.media_offsets.push_back(static_cast<int64_t>(b.tokens.size()));
    const int64_t n = grid[i].patches() / cell;
    b.tokens.insert(b.tokens.end(), static_cast<std::size_t>(n), kMediaToken);
    b.media_tokens += n;
  }
  add_text(text_runs.back());
  const auto padded = static_cast<std::size_t>(
      (b.seq_len() + r.pad_multiple - 1) / r.pad_multiple * r.pad_multiple);
  b.tokens.resize(padded, kPadToken);
  b.labels.assign(padded, kIgnoreLabel);
  bool any_label = false;
  for (std::size_t i = 0; i + 1 < padded; ++i) {
    if (b.tokens[i + 1] >= kFirstTextToken) {
      b.labels[i] = b.tokens[i + 1];
      any_label = true;
    }
  }
  FRAMESHARD_CHECK(
      any_label,
      fn,
      "expected a text token after the first position (a label to train "
      "on), got none in a sequence of ",
      b.media_tokens,
      " media and ",
      b.text_tokens,
      " text tokens");
  b.grid = std::move(grid);
  return b;
}

std::vector<GridThw> scaled(
    std::vector<GridThw> grid, const MediaLayout& layout, int64_t scale) {
  Workload wl;
  wl.grid = std::move(grid);
  wl.layout = layout;
  return scale_workload(wl, scale).grid;
}

// The grpo preset (see the banner): this replica's group_size samples of
// the step's dp_size prompts, each a scaled mixed draw, in pack order.
BatchLayout grpo_batch(
    const char* fn,
    const DataConfig& data,
    const MediaLayout& layout,
    const BatchRequest& r) {
  FRAMESHARD_CHECK(
      data.group_size >= 1,
      fn,
      "data.group_size: expected a positive integer, got ",
      data.group_size);
  FRAMESHARD_CHECK(
      data.group_order == "spread" || data.group_order == "contiguous",
      fn,
      "data.group_order: expected one of spread, contiguous, got \"",
      data.group_order,
      "\"");
  check_dp_size(fn, r);
  const int64_t g = data.group_size;
  const bool spread = data.group_order == "spread";
  std::map<int64_t, std::vector<GridThw>> prompts;  // drawn once each
  std::vector<GridThw> grid;
  std::vector<uint64_t> seeds;
  for (int64_t k = 0; k < g; ++k) {
    // This replica's k-th sample in the step's prompt-major order.
    const int64_t sample =
        spread ? k * r.dp_size + r.dp_rank : r.dp_rank * g + k;
    const int64_t p = sample / g;
    const uint64_t ps = prompt_seed(data.seed, r.step, p);
    auto it = prompts.find(p);
    if (it == prompts.end()) {
      it = prompts
               .emplace(
                   p, scaled(grpo_prompt_workload(ps).grid, layout, data.scale))
               .first;
    }
    for (std::size_t m = 0; m < it->second.size(); ++m) {
      grid.push_back(it->second[m]);
      seeds.push_back(media_seed(ps, static_cast<int64_t>(m)));
    }
  }
  const std::vector<int64_t> runs(grid.size() + 1, data.text_tokens);
  BatchLayout b =
      build_layout(fn, std::move(grid), runs, layout, r, text_seed(data, r));
  b.media_seed = std::move(seeds);
  return b;
}

}  // namespace

BatchLayout synthetic_batch(
    const DataConfig& data, const MediaLayout& layout, const BatchRequest& r) {
  const char* fn = "train::synthetic_batch";
  check_common(fn, data, r);
  const auto presets = workload_preset_names();
  if (std::find(presets.begin(), presets.end(), data.preset) == presets.end()) {
    std::string names;
    for (const auto& n : presets) {
      names += (names.empty() ? "" : ", ") + n;
    }
    detail::fail(
        fn,
        "data.preset: expected one of ",
        names,
        ", got \"",
        data.preset,
        "\"");
  }
  FRAMESHARD_CHECK(
      data.text_tokens >= 1,
      fn,
      "data.text_tokens: expected a positive integer, got ",
      data.text_tokens);
  if (data.preset == "grpo") {
    return grpo_batch(fn, data, layout, r);
  }
  const uint64_t seed = step_seed(data.seed, r.step, r.dp_rank);
  std::vector<GridThw> grid =
      scaled(preset_workload(data.preset, seed).grid, layout, data.scale);
  const std::vector<int64_t> runs(grid.size() + 1, data.text_tokens);
  return build_layout(fn, std::move(grid), runs, layout, r, seed ^ kTextSalt);
}

BatchLayout manifest_batch(
    const std::vector<ManifestSample>& samples,
    const DataConfig& data,
    const MediaLayout& layout,
    const BatchRequest& r) {
  const char* fn = "train::manifest_batch";
  check_common(fn, data, r);
  FRAMESHARD_CHECK(
      !samples.empty(), fn, "expected at least one sample, got none");
  check_dp_size(fn, r);
  FRAMESHARD_CHECK(
      data.samples_per_step >= 1,
      fn,
      "data.samples_per_step: expected a positive integer, got ",
      data.samples_per_step);
  // (step * dp_size + dp_rank) * samples_per_step, modulo n without
  // overflow.
  const auto n = static_cast<int64_t>(samples.size());
  const int64_t slot = ((r.step % n) * (r.dp_size % n) + r.dp_rank % n) % n;
  int64_t index = slot * (data.samples_per_step % n) % n;
  std::vector<GridThw> grid;
  std::vector<int64_t> runs{0};
  for (int64_t k = 0; k < data.samples_per_step; ++k, index = (index + 1) % n) {
    const ManifestSample& s = samples[static_cast<std::size_t>(index)];
    FRAMESHARD_CHECK(
        (s.text_runs.empty() || s.text_runs.size() == s.grid.size() + 1) &&
            std::all_of(
                s.text_runs.begin(),
                s.text_runs.end(),
                [](int64_t r) { return r >= 0; }),
        fn,
        "sample ",
        index,
        ": expected no text runs or ",
        s.grid.size() + 1,
        " non-negative ones (one per medium and one at the end), got ",
        s.text_runs.size());
    // Adjacent text runs (one sample's end, the next one's start) merge.
    for (std::size_t i = 0; i < s.grid.size(); ++i) {
      runs.back() += s.text_runs.empty() ? data.text_tokens : s.text_runs[i];
      grid.push_back(s.grid[i]);
      runs.push_back(0);
    }
    runs.back() +=
        s.text_runs.empty() ? data.text_tokens : s.text_runs[s.grid.size()];
  }
  return build_layout(
      fn,
      scaled(std::move(grid), layout, data.scale),
      runs,
      layout,
      r,
      text_seed(data, r));
}

}  // namespace train
}  // namespace frameshard
