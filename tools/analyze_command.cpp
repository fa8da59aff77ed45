// `frameshard analyze MANIFEST.jsonl`: "check your workload". Turns a
// dataset manifest's media sizes into grids with the Qwen-VL processors'
// rules (frameshard/media_resize.h), groups the samples into batches and
// reports, for each CP size and partitioner, the share of batches the
// policy shards, the predicted vision speed-up (with and without the
// gather), the imbalance and the gather volume (frameshard/analyze.h).
//
//   frameshard analyze examples/manifests/infovqa.jsonl --family qwen2-vl
//   frameshard analyze m.jsonl --json --plot m.svg
//       --distributed.multimodal.vision.frame_sharding.policy auto  (one line)
//   frameshard analyze examples/recipes/pages_or_text.jsonl  (text-only
//       samples, "grid_thw": [], are counted; a batch of them has no media)
//   frameshard analyze --preset grpo --batches 4   (seeded presets instead:
//       batch k is the preset of seed --seed + k; the grpo preset's repeats
//       are reported as distinct and total frames, and planned once each
//       with frame_sharding.dedup)
#include "analyze_report.h"
#include "commands.h"
#include "dotted_overrides.h"

#include <frameshard/analyze.h>
#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/media_manifest.h>
#include <frameshard/workload.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

struct AnalyzeArgs {
  std::string manifest;
  std::string preset;  // instead of a manifest
  uint64_t seed = 0;
  int64_t batches = 4;
  std::string family = "qwen3-vl";
  std::string config;
  std::vector<int64_t> cps{2, 4, 8, 16, 32, 64};
  int64_t samples_per_batch = 1;
  bool json = false;
  std::string plot;
  bool emit_grids = false;
};

// One {"grid_thw": ...} line per sample: a training manifest
// (frameshard/train/data_batch.h) of the resized media, with the sample's
// text runs where it gave text_tokens ("grid_thw": [] for a text-only one).
void emit_grids(const std::vector<MediaSample>& samples) {
  for (const MediaSample& s : samples) {
    nlohmann::json rows = nlohmann::json::array();
    for (const GridThw& g : s.grid) {
      rows.push_back({g.t, g.h, g.w});
    }
    nlohmann::json line = {{"grid_thw", rows}};
    if (!s.text_runs.empty()) {
      line["text_tokens"] = s.text_runs;
    }
    std::cout << line.dump() << "\n";
  }
}

// The manifest's samples, packed --samples-per-batch at a time, planned
// with the family's processor layout. False after --emit-grids.
bool manifest_batches(
    const AnalyzeArgs& args,
    AnalyzeContext& ctx,
    AnalyzeOptions& o,
    std::vector<std::vector<GridThw>>& batches) {
  const ProcessorRule& rule = processor_rule(args.family);
  const std::vector<MediaSample> samples =
      load_media_manifest(args.manifest, rule);
  if (args.emit_grids) {
    emit_grids(samples);
    return false;
  }
  ctx.manifest = args.manifest;
  ctx.family = args.family;
  ctx.samples = static_cast<int64_t>(samples.size());
  ctx.samples_per_batch = args.samples_per_batch;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i % static_cast<std::size_t>(args.samples_per_batch) == 0) {
      batches.emplace_back();
    }
    const MediaSample& s = samples[i];
    batches.back().insert(batches.back().end(), s.grid.begin(), s.grid.end());
    ctx.images += s.images;
    ctx.videos += s.videos;
    ctx.grid_rows += static_cast<int64_t>(s.grid.size()) - s.images - s.videos;
    ctx.text_only_samples += s.text_only() ? 1 : 0;
  }
  o.plan.layout = MediaLayout{rule.merge_size, rule.temporal_patch_size};
  return true;
}

// --batches draws of a preset (seeds --seed, --seed + 1, ...), each one
// batch, with the media ids of the presets that have them (grpo).
std::vector<std::vector<GridThw>> preset_batches(
    const AnalyzeArgs& args, AnalyzeContext& ctx, AnalyzeOptions& o) {
  std::vector<std::vector<GridThw>> batches;
  for (int64_t k = 0; k < args.batches; ++k) {
    Workload wl =
        preset_workload(args.preset, args.seed + static_cast<uint64_t>(k));
    o.plan.layout = wl.layout;
    if (!wl.media_ids.empty()) {
      o.media_ids.push_back(std::move(wl.media_ids));
    }
    for (const GridThw& g : wl.grid) {
      (g.t > 1 ? ctx.videos : ctx.images) += 1;
    }
    batches.push_back(std::move(wl.grid));
  }
  ctx.preset = args.preset;
  ctx.seed = args.seed;
  ctx.family = args.family;
  ctx.samples = args.batches;
  return batches;
}

// MANIFEST is not a CLI11 positional: that would take the value of a dotted
// override (`--...frame_sharding.dedup true`) when --preset replaces it.
// The first argument that is neither an override nor its value.
std::string take_manifest(std::vector<std::string>& extras) {
  for (std::size_t i = 0; i < extras.size(); ++i) {
    const std::string& a = extras[i];
    if (a.rfind("--", 0) == 0) {
      i += a.find('=') == std::string::npos ? 1 : 0;  // skip its value
      continue;
    }
    std::string manifest = a;
    extras.erase(extras.begin() + static_cast<std::ptrdiff_t>(i));
    return manifest;
  }
  return "";
}

void run_analyze(const AnalyzeArgs& args, const std::vector<std::string>& ex) {
  // Precedence: defaults (the family's tower) < --config < dotted
  // overrides; sharding is always enabled (analyze shows what it would do).
  Config config;
  config.frame_sharding.tower = args.family;
  if (!args.config.empty()) {
    config = load_config(args.config);
  }
  apply_dotted_overrides(
      ex,
      [&config](const std::string& k, const std::string& v) {
        apply_override(config, k, v);
      },
      "analyze",
      std::string(kFrameShardingPath) + ".policy auto");
  config.frame_sharding.enabled = true;

  AnalyzeContext ctx;
  AnalyzeOptions o;
  o.cps = args.cps;
  o.plan = plan_options(config);
  o.dedup = config.frame_sharding.dedup;
  std::vector<std::vector<GridThw>> batches;
  if (!args.preset.empty()) {
    batches = preset_batches(args, ctx, o);
    if (args.emit_grids) {
      std::vector<MediaSample> samples(batches.size());
      for (std::size_t b = 0; b < batches.size(); ++b) {
        samples[b].grid = batches[b];
      }
      emit_grids(samples);
      return;
    }
  } else if (!manifest_batches(args, ctx, o, batches)) {
    return;  // --emit-grids printed them
  }
  ctx.plan = o.plan;
  ctx.dedup = o.dedup;
  const WorkloadAnalysis a = analyze_batches(batches, o);

  if (!args.plot.empty()) {
    std::ofstream out(args.plot, std::ios::binary);
    out << analysis_svg(ctx, a);
    FRAMESHARD_CHECK(
        out.good(),
        "analyze",
        "--plot: expected a writable file, got \"",
        args.plot,
        "\"");
  }
  if (args.json) {
    std::cout << analysis_json(ctx, a).dump(2) << "\n";
    return;
  }
  print_analysis(std::cout, ctx, a);
  if (!args.plot.empty()) {
    std::cout << "wrote " << args.plot << "\n";
  }
}

}  // namespace

void register_analyze_command(CLI::App& app) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* sub = app.add_subcommand(
      "analyze",
      "Check a dataset manifest: per CP size and partitioner, the share of "
      "batches that would shard, the predicted vision speed-up, imbalance "
      "and gather volume.");
  sub->footer(
      "MANIFEST (first argument that is not an option): JSONL, one sample "
      "per line: {\"images\": [[h, w], ...]}, "
      "{\"videos\": [{\"frames\": n, \"fps\": f, \"height\": h, \"width\": "
      "w}]} (pixels, before preprocessing) and/or {\"grid_thw\": [[t, h, "
      "w]]}, \"text_tokens\": n; a sample without media ({\"grid_thw\": "
      "[]} or only text_tokens) is text-only (frameshard/media_manifest.h)."
      "\n"
      "Policy, cost model and bandwidth come from --config and dotted "
      "overrides, e.g.\n"
      "  --distributed.multimodal.vision.frame_sharding.policy auto\n"
      "  --distributed.multimodal.vision.frame_sharding.cost_alpha cal.txt\n"
      "Frame sharding is always enabled here.");
  sub->add_option(
         "--preset",
         args->preset,
         "A seeded preset instead of a MANIFEST (doc | multi | video | "
         "mixed | grpo), --batches draws of it")
      ->check(CLI::IsMember(workload_preset_names()));
  sub->add_option("--seed", args->seed, "--preset: the first batch's seed")
      ->capture_default_str();
  sub->add_option("--batches", args->batches, "--preset: batches drawn")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  sub->add_option(
         "--family", args->family, "Processor rule and tower of the cost model")
      ->check(CLI::IsMember(processor_rule_names()))
      ->capture_default_str();
  sub->add_option("--config", args->config, "YAML config file");
  sub->add_option("--cp", args->cps, "CP sizes")
      ->check(CLI::Range(int64_t{1}, kMaxWorld))
      ->capture_default_str();
  sub->add_option(
         "--samples-per-batch",
         args->samples_per_batch,
         "Consecutive samples packed into one batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_flag(
      "--emit-grids",
      args->emit_grids,
      "Only print each sample's grid_thw (a training manifest) and stop");
  sub->add_option("--plot", args->plot, "Write an SVG plot of the speed-up");
  sub->allow_extras();
  sub->callback([args, sub] {
    std::vector<std::string> extras = sub->remaining();
    args->manifest = take_manifest(extras);
    if (args->manifest.empty() == args->preset.empty()) {
      throw CLI::RequiredError("one of a MANIFEST and --preset");
    }
    run_analyze(*args, extras);
  });
}

}  // namespace cli
}  // namespace frameshard
