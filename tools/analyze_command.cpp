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
#include "analyze_report.h"
#include "commands.h"
#include "dotted_overrides.h"

#include <frameshard/analyze.h>
#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/media_manifest.h>

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
  std::string family = "qwen3-vl";
  std::string config;
  std::vector<int64_t> cps{2, 4, 8, 16, 32, 64};
  int64_t samples_per_batch = 1;
  bool json = false;
  std::string plot;
  bool emit_grids = false;
};

// One {"grid_thw": ...} line per sample: a training manifest
// (frameshard/train/data_batch.h) of the resized media.
void emit_grids(const std::vector<MediaSample>& samples) {
  for (const MediaSample& s : samples) {
    nlohmann::json rows = nlohmann::json::array();
    for (const GridThw& g : s.grid) {
      rows.push_back({g.t, g.h, g.w});
    }
    std::cout << nlohmann::json{{"grid_thw", rows}}.dump() << "\n";
  }
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

  const ProcessorRule& rule = processor_rule(args.family);
  const std::vector<MediaSample> samples =
      load_media_manifest(args.manifest, rule);
  if (args.emit_grids) {
    emit_grids(samples);
    return;
  }
  AnalyzeContext ctx;
  ctx.manifest = args.manifest;
  ctx.family = args.family;
  ctx.samples = static_cast<int64_t>(samples.size());
  ctx.samples_per_batch = args.samples_per_batch;
  std::vector<std::vector<GridThw>> batches;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i % static_cast<std::size_t>(args.samples_per_batch) == 0) {
      batches.emplace_back();
    }
    const MediaSample& s = samples[i];
    batches.back().insert(batches.back().end(), s.grid.begin(), s.grid.end());
    ctx.images += s.images;
    ctx.videos += s.videos;
  }

  AnalyzeOptions o;
  o.cps = args.cps;
  o.plan = plan_options(config);
  o.plan.layout = MediaLayout{rule.merge_size, rule.temporal_patch_size};
  ctx.plan = o.plan;
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
      "MANIFEST: JSONL, one sample per line: {\"images\": [[h, w], ...]}, "
      "{\"videos\": [{\"frames\": n, \"fps\": f, \"height\": h, \"width\": "
      "w}]} (pixels, before preprocessing) and/or {\"grid_thw\": [[t, h, "
      "w]]} (frameshard/media_manifest.h).\n"
      "Policy, cost model and bandwidth come from --config and dotted "
      "overrides, e.g.\n"
      "  --distributed.multimodal.vision.frame_sharding.policy auto\n"
      "  --distributed.multimodal.vision.frame_sharding.cost_alpha cal.txt\n"
      "Frame sharding is always enabled here.");
  sub->add_option("manifest", args->manifest, "Dataset manifest (JSONL)")
      ->required();
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
  sub->callback([args, sub] { run_analyze(*args, sub->remaining()); });
}

}  // namespace cli
}  // namespace frameshard
