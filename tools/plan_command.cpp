// `frameshard plan`: plan one workload for K ranks, show the per-rank loads
// and compare every partitioner on the same unit costs. The workload is a
// preset, a workload file or samples of a manifest (--manifest, text-only
// samples included: a batch without media plans to "no media").
#include "commands.h"
#include "dotted_overrides.h"
#include "manifest_batch.h"
#include "option_checks.h"
#include "plan_mesh.h"
#include "plan_report.h"

#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/dedup.h>
#include <frameshard/error.h>
#include <frameshard/media_resize.h>
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
  std::string manifest;  // instead of --workload / --preset
  std::string family = "qwen3-vl";
  int64_t sample = 0;   // the manifest's first sample planned
  int64_t samples = 1;  // and how many, as one batch
  std::string cp;
  std::string partitioner;
  std::string alpha;
  std::string config;
  std::string svg;
  bool json = false;
  bool split_frames = false;
  int64_t dp = 0;  // --dp: the mesh plan of dp replicas (plan_mesh.h)
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
    if (traits(c.method).exact) {
      best = c.partition.max_cost();
    }
  }
  for (Candidate& c : out) {
    c.ratio_to_optimal = best > 0 ? c.partition.max_cost() / best : 1.0;
  }
  return out;
}

// --manifest and the options that choose its samples and processor rule;
// --manifest excludes `others` (--workload, --preset).
void add_manifest_options(
    CLI::App& sub, PlanArgs& args, const std::vector<CLI::Option*>& others) {
  CLI::Option* manifest = sub.add_option(
      "--manifest",
      args.manifest,
      "JSONL training or dataset manifest (as analyze reads it); plans "
      "--samples samples from --sample as one batch, text-only samples "
      "included");
  manifest->check(non_empty());
  for (CLI::Option* o : others) {
    manifest->excludes(o);
  }
  sub.add_option(
         "--family", args.family, "--manifest: processor rule and tower")
      ->check(CLI::IsMember(processor_rule_names()))
      ->needs(manifest)
      ->capture_default_str();
  sub.add_option("--sample", args.sample, "--manifest: first sample planned")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->needs(manifest)
      ->capture_default_str();
  sub.add_option(
         "--samples", args.samples, "--manifest: samples planned as one batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->needs(manifest)
      ->capture_default_str();
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
    if (!args.manifest.empty()) {
      // The family's tower counts the FLOPs, as in analyze.
      config.frame_sharding.tower = args.family;
    }
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

// --dp: one batch per replica -- the manifest's next --samples samples, the
// preset at seeds seed, seed + 1, ..., or the workload file on every
// replica -- planned over the dp x cp mesh.
void run_mesh_plan(const PlanArgs& args, const Config& config) {
  FRAMESHARD_CHECK(
      args.svg.empty(),
      "plan",
      "expected no --svg with --dp (the chart is of one CP plan), got ",
      args.svg);
  std::vector<std::vector<GridThw>> replicas;
  std::vector<std::string> origins;
  MediaLayout layout;
  for (int64_t q = 0; q < args.dp; ++q) {
    Workload wl;
    if (!args.manifest.empty()) {
      const ManifestBatch b = load_manifest_batch(
          args.manifest,
          args.family,
          args.sample + q * args.samples,
          args.samples);
      wl = b.workload;
      origins.push_back(manifest_origin(b));
    } else if (!args.workload.empty()) {
      wl = load_workload(args.workload);
      origins.push_back("file " + args.workload);
    } else {
      wl = preset_workload(args.preset, args.seed + static_cast<uint64_t>(q));
      origins.push_back(
          "preset " + args.preset + ", seed " +
          std::to_string(args.seed + static_cast<uint64_t>(q)));
    }
    layout = wl.layout;
    replicas.push_back(wl.grid);
  }
  const MeshPlan mp =
      make_mesh_plan(replicas, mesh_plan_options(config, args.dp, layout));
  if (args.json) {
    std::cout << mesh_plan_json(mp, origins).dump(2) << "\n";
  } else {
    print_mesh_plan(std::cout, mp, origins);
  }
}

void run_plan(const PlanArgs& args, const std::vector<std::string>& extras) {
  std::string policy_note;
  const Config config = plan_config(args, extras, policy_note);
  if (args.dp > 0) {
    run_mesh_plan(args, config);
    return;
  }
  Workload wl;
  std::string origin;
  ManifestBatch batch;
  if (!args.manifest.empty()) {
    batch = load_manifest_batch(
        args.manifest, args.family, args.sample, args.samples);
    wl = batch.workload;
    origin = manifest_origin(batch);
  } else if (!args.workload.empty()) {
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
    nlohmann::json j = plan_json(rep);
    if (!args.manifest.empty()) {
      j["manifest"] = manifest_json(batch);
    }
    std::cout << j.dump(2) << "\n";
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
      "path.\n"
      "--manifest FILE plans samples [--sample, --sample + --samples) of a\n"
      "training or dataset manifest (as analyze reads it, with --family's\n"
      "processor rule) as one batch; text-only samples add no media, and a\n"
      "batch without media takes the replicated path (no media).");
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
  add_manifest_options(*sub, *args, {wl_opt, preset_opt});
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
  sub->add_option(
         "--dp",
         args->dp,
         "Plan D replicas over the dp x cp mesh (mesh_dims [dp, cp]): the "
         "manifest's next --samples samples per replica, the preset at seeds "
         "seed, seed+1, ..., or the workload on every replica; with "
         "policy auto, the step's choice of mesh or CP-only")
      ->check(CLI::Range(int64_t{1}, kMaxMeshReplicas));
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_option("--svg", args->svg, "Write an SVG bar chart of the loads");
  sub->allow_extras();
  sub->callback([args, sub] { run_plan(*args, sub->remaining()); });
}

}  // namespace cli
}  // namespace frameshard
