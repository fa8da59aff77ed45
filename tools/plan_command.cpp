// `frameshard plan`: plan one workload for K ranks, show the per-rank loads
// and compare every partitioner on the same unit costs.
#include "commands.h"
#include "dotted_overrides.h"
#include "option_checks.h"
#include "plan_report.h"

#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/dedup.h>
#include <frameshard/error.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/workload.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

constexpr int64_t kPlanDefaultCp = 4;

struct PlanArgs {
  std::string workload;
  std::string preset = "mixed";
  uint64_t seed = 0;
  std::string cp;
  std::string partitioner;
  std::string alpha;
  std::string config;
  std::string svg;
  bool json = false;
  bool split_frames = false;
};

std::string fs_key(const char* leaf) {
  return std::string(kFrameShardingPath) + "." + leaf;
}

// Applies an explicit option through the config's own validation, naming
// the option in the error.
void apply_option(
    Config& config,
    const std::string& key,
    const std::string& value,
    const char* option) {
  try {
    apply_override(config, key, value);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (from " + option + ")");
  }
}

std::vector<Candidate> compare_partitioners(const ShardPlan& plan) {
  std::vector<Candidate> out;
  for (Partitioner p : all_partitioners()) {
    out.push_back(
        {p, partition_costs(plan.unit_costs, plan.options.world, p), 1.0});
  }
  double best = 0.0;
  for (const Candidate& c : out) {
    if (c.method == Partitioner::kOptimal) {
      best = c.partition.max_cost();
    }
  }
  for (Candidate& c : out) {
    c.ratio_to_optimal = best > 0 ? c.partition.max_cost() / best : 1.0;
  }
  return out;
}

// ------------------------------------------------------------------ run

// The config of the plan and the note on where its `enabled` came from.
// Precedence: defaults < --config < dotted overrides < --cp, --partitioner,
// --alpha, --split-frames.
Config plan_config(
    const PlanArgs& args,
    const std::vector<std::string>& extras,
    std::string& policy_note) {
  Config config;
  if (!args.config.empty()) {
    config = load_config(args.config);
    policy_note =
        "enabled=" +
        std::string(config.frame_sharding.enabled ? "true" : "false") +
        " from " + args.config;
  } else {
    // Without a training config the plan is what sharding would do: start
    // from cp 4 with frame sharding on (the library default is off).
    config.cp_size = kPlanDefaultCp;
    config.frame_sharding.enabled = true;
    policy_note = "enabled=true by the plan default (no --config)";
  }
  const std::vector<std::string> keys = apply_dotted_overrides(
      extras,
      [&config](const std::string& k, const std::string& v) {
        apply_override(config, k, v);
      },
      "plan",
      fs_key("enabled") + " false");
  const std::string enabled_key = fs_key("enabled");
  // The key itself or a section above it (--distributed... '{enabled: x}').
  if (std::any_of(keys.begin(), keys.end(), [&](const std::string& k) {
        return enabled_key.compare(0, k.size(), k) == 0 &&
               (k.size() == enabled_key.size() || enabled_key[k.size()] == '.');
      })) {
    policy_note =
        "enabled=" +
        std::string(config.frame_sharding.enabled ? "true" : "false") +
        " from an override";
  }
  if (!args.cp.empty()) {
    apply_option(config, "distributed.cp_size", args.cp, "--cp");
  }
  if (!args.partitioner.empty()) {
    apply_option(
        config, fs_key("partitioner"), args.partitioner, "--partitioner");
  }
  if (!args.alpha.empty()) {
    apply_option(config, fs_key("cost_alpha"), args.alpha, "--alpha");
  }
  if (args.split_frames) {
    apply_option(config, fs_key("split_frames"), "true", "--split-frames");
  }
  return config;
}

void run_plan(const PlanArgs& args, const std::vector<std::string>& extras) {
  std::string policy_note;
  const Config config = plan_config(args, extras, policy_note);
  Workload wl;
  std::string origin;
  if (!args.workload.empty()) {
    wl = load_workload(args.workload);
    origin = "file";
  } else {
    wl = preset_workload(args.preset, args.seed);
    origin = "preset, seed " + std::to_string(args.seed);
  }

  PlanOptions opts = plan_options(config);
  opts.layout = wl.layout;
  // Repeated media (media_ids): their distinct units, planned alone with
  // frame_sharding.dedup as encode would.
  FrameDedup dedup;
  if (!wl.media_ids.empty()) {
    dedup = dedup_frames(
        wl.grid,
        media_id_unit_keys(wl.grid, wl.media_ids, wl.layout),
        wl.layout);
  }
  const bool distinct = dedup.units > 0 && config.frame_sharding.dedup;
  const ShardPlan plan = make_plan(distinct ? dedup.grid : wl.grid, opts);
  const PlanReport rep{
      wl,
      origin,
      plan,
      policy_note,
      compare_partitioners(plan),
      tower_preset(config.frame_sharding.tower),
      dedup,
      distinct};

  if (!args.svg.empty()) {
    std::ofstream out(args.svg, std::ios::binary);
    FRAMESHARD_CHECK(
        out.good(), "plan", "expected a writable --svg file, got ", args.svg);
    out << plan_svg(rep);
    FRAMESHARD_CHECK(
        out.good(),
        "plan",
        "expected to write --svg file ",
        args.svg,
        ", got a write error");
  }
  if (args.json) {
    std::cout << plan_json(rep).dump(2) << "\n";
  } else {
    print_plan(std::cout, rep);
    if (!args.svg.empty()) {
      std::cout << "\nwrote " << args.svg << "\n";
    }
  }
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* sub = app.add_subcommand(
      "plan",
      "Plan a workload over K context-parallel ranks: per-rank loads and a "
      "comparison of all partitioners.");
  sub->footer(
      "Config precedence: library defaults < --config FILE < dotted "
      "overrides < --cp/--partitioner/--alpha/--split-frames.\n"
      "Dotted overrides take the config's key paths, e.g.\n"
      "  --distributed.multimodal.vision.frame_sharding.enabled false\n"
      "  --distributed.multimodal.vision.frame_sharding.min_tokens=0\n"
      "  --distributed.multimodal.vision.frame_sharding.split_frames true\n"
      "Without --config, plan starts from cp_size 4 with frame sharding\n"
      "ENABLED (a training config defaults to disabled; plan shows what\n"
      "sharding would do). With --config the file is taken as written, so\n"
      "the path is what training with that file would take. Either way the\n"
      "partition for the requested K is reported, even on the replicated\n"
      "path.");
  auto* wl_opt = sub->add_option(
      "--workload",
      args->workload,
      "JSON workload {\"grid_thw\": [[t,h,w],...], \"spatial_merge_size\": 2, "
      "\"temporal_patch_size\": 2}");
  auto* preset_opt = sub->add_option(
                            "--preset",
                            args->preset,
                            "Synthetic workload: doc | multi | video | mixed | "
                            "grpo")
                         ->default_str("mixed");
  wl_opt->excludes(preset_opt);
  sub->add_option("--seed", args->seed, "Seed of the preset")->default_str("0");
  sub->add_option(
         "--cp", args->cp, "Ranks K (default: the config's cp_size, else 4)")
      ->check(non_empty());
  sub->add_option(
         "--partitioner",
         args->partitioner,
         "optimal | greedy | count | lpt (default: config, else "
         "optimal)")
      ->check(partitioner_name());
  sub->add_option(
         "--alpha",
         args->alpha,
         "Cost model: integer alpha | auto | <tower preset> | automodel | "
         "automodel:<preset> | quadratic:a,b,c (default: config, else auto)")
      ->check(non_empty());
  sub->add_option("--config", args->config, "YAML config file")
      ->check(non_empty());
  sub->add_flag(
      "--split-frames",
      args->split_frames,
      "Let the optimal partitioner cut large frames across ranks "
      "(frame_sharding.split_frames true)");
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_option("--svg", args->svg, "Write an SVG bar chart of the loads");
  sub->allow_extras();
  sub->callback([args, sub] { run_plan(*args, sub->remaining()); });
}

}  // namespace cli
}  // namespace frameshard
