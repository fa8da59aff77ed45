// `frameshard plan`: plan one workload for K ranks, show the per-rank loads
// and compare every partitioner on the same unit costs.
#include "commands.h"
#include "dotted_overrides.h"
#include "option_checks.h"

#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>
#include <frameshard/workload.h>
#include <frameshard/xml.h>

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
};

// What the comparison table shows for one partitioner.
struct Candidate {
  Partitioner method;
  Partition partition;
  double ratio_to_optimal = 1.0;
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

std::string fmt(double v, const char* f) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// 1234567 -> "1,234,567".
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
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

// No partition (contiguous or not) has a bottleneck below the largest unit
// or the mean: when a huge image dominates, this is what every partitioner
// hits.
double lower_bound_cost(const ShardPlan& plan) {
  double largest = 0.0;
  for (double c : plan.unit_costs) {
    largest = std::max(largest, c);
  }
  return std::max(largest, plan.partition.mean_cost());
}

// ------------------------------------------------------------- output

void print_human(
    std::ostream& os,
    const Workload& wl,
    const std::string& origin,
    const ShardPlan& plan,
    const std::string& policy_note,
    const std::vector<Candidate>& candidates) {
  const FrameSet& f = plan.frames;
  const Partition& part = plan.partition;
  const double total = part.mean_cost() * static_cast<double>(part.world);
  os << "workload     " << wl.name << " (" << origin
     << "): " << grouped(static_cast<int64_t>(f.grid.size())) << " media, "
     << grouped(static_cast<int64_t>(f.units.size())) << " frame units, "
     << grouped(f.total_tokens) << " tokens, " << grouped(f.total_patch_rows)
     << " patch rows\n";
  os << "cost model   " << plan.options.cost.label << "\n";
  os << "plan         cp " << plan.options.world << ", partitioner "
     << to_string(plan.options.partitioner) << ", min_local_patch_rows "
     << plan.options.min_local_patch_rows << ", fingerprint "
     << fingerprint_hex(plan.fingerprint) << "\n";
  os << "policy       " << policy_note << "; min_tokens "
     << plan.options.policy.min_tokens << ", min_frames "
     << plan.options.policy.min_frames << "\n";
  os << "path         " << to_string(plan.path) << " (" << plan.reason << ")\n";
  if (!plan.sharded()) {
    os << "             the partition below is what sharding over cp "
       << plan.options.world << " would do\n";
  }
  os << "\n";

  constexpr int kBar = 32;
  os << "rank  units  patch rows   tokens        cost   share  "
     << pad_right("load", kBar) << "  pad  dummy\n";
  const double max_cost = part.max_cost();
  for (const RankShard& r : plan.ranks) {
    const int filled =
        max_cost > 0 ? static_cast<int>(r.cost / max_cost * kBar + 0.5) : 0;
    const double share = total > 0 ? 100.0 * r.cost / total : 0.0;
    os << pad_left(std::to_string(r.rank), 4) << "  "
       << pad_left(grouped(static_cast<int64_t>(r.units.size())), 5) << "  "
       << pad_left(grouped(r.real_patch_rows), 10) << "  "
       << pad_left(grouped(r.real_tokens), 7) << "  "
       << pad_left(fmt(r.cost, "%.4g"), 10) << "  "
       << pad_left(fmt(share, "%.1f%%"), 6) << "  "
       << std::string(static_cast<std::size_t>(filled), '#')
       << std::string(static_cast<std::size_t>(kBar - filled), '.') << "  "
       << pad_left(std::to_string(r.pad_frames), 3) << "  "
       << pad_left(std::to_string(r.dummy_frames), 5) << "\n";
  }
  const double bound = lower_bound_cost(plan);
  os << "\nbalance      max " << fmt(part.max_cost(), "%.4g") << ", mean "
     << fmt(part.mean_cost(), "%.4g") << ", max/mean "
     << fmt(part.imbalance(), "%.4f") << "\n";
  os << "lower bound  " << fmt(bound, "%.4g")
     << " = max(largest unit, mean): max/mean "
     << fmt(part.mean_cost() > 0 ? bound / part.mean_cost() : 1.0, "%.4f")
     << "\n\n";

  // lpt is not contiguous (its gather needs a permutation), so it can beat
  // the contiguous optimum; the table says which rows are comparable.
  os << "partitioner  bottleneck  max/mean  vs optimal  layout\n";
  for (const Candidate& c : candidates) {
    const bool chosen = c.method == plan.options.partitioner;
    os << pad_right(to_string(c.method) + (chosen ? " *" : ""), 11) << "  "
       << pad_left(fmt(c.partition.max_cost(), "%.4g"), 10) << "  "
       << pad_left(fmt(c.partition.imbalance(), "%.4f"), 8) << "  "
       << pad_left(fmt(c.ratio_to_optimal, "%.4f"), 10) << "  "
       << (c.partition.contiguous() ? "contiguous" : "permuted") << "\n";
  }
}

nlohmann::json to_json_report(
    const Workload& wl,
    const std::string& origin,
    const ShardPlan& plan,
    const std::string& policy_note,
    const std::vector<Candidate>& candidates) {
  const FrameSet& f = plan.frames;
  const Partition& part = plan.partition;
  const double total = part.mean_cost() * static_cast<double>(part.world);
  nlohmann::json j;
  j["workload"] = wl.name;
  j["origin"] = origin;
  j["cp"] = plan.options.world;
  j["partitioner"] = to_string(plan.options.partitioner);
  j["cost_model"] = plan.options.cost.label;
  j["effective_alpha"] = plan.options.cost.effective_alpha();
  j["min_local_patch_rows"] = plan.options.min_local_patch_rows;
  j["policy"] = {
      {"enabled", plan.options.policy.enabled},
      {"min_tokens", plan.options.policy.min_tokens},
      {"min_frames", plan.options.policy.min_frames},
      {"note", policy_note}};
  j["path"] = to_string(plan.path);
  j["reason"] = plan.reason;
  j["media"] = f.grid.size();
  j["units"] = f.units.size();
  j["tokens"] = f.total_tokens;
  j["patch_rows"] = f.total_patch_rows;
  j["contiguous"] = part.contiguous();
  if (part.contiguous()) {
    j["cuts"] = part.cuts;
  } else {
    j["assignment"] = part.assignment;
  }
  j["rank_costs"] = part.rank_costs;
  j["max_cost"] = part.max_cost();
  j["mean_cost"] = part.mean_cost();
  j["imbalance"] = part.imbalance();
  j["lower_bound_cost"] = lower_bound_cost(plan);
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankShard& r : plan.ranks) {
    nlohmann::json grid = nlohmann::json::array();
    for (const GridThw& g : r.grid) {
      grid.push_back({g.t, g.h, g.w});
    }
    ranks.push_back({
        {"rank", r.rank},
        {"units", r.units.size()},
        {"patch_rows", r.real_patch_rows},
        {"tokens", r.real_tokens},
        {"cost", r.cost},
        {"share", total > 0 ? r.cost / total : 0.0},
        {"pad_frames", r.pad_frames},
        {"dummy_frames", r.dummy_frames},
        {"local_patch_rows", r.local_patch_rows},
        {"local_tokens", r.local_tokens},
        {"grid", grid},
    });
  }
  j["ranks"] = ranks;
  j["gather_counts"] = plan.gather_counts;
  j["fingerprint"] = fingerprint_hex(plan.fingerprint);
  nlohmann::json cmp = nlohmann::json::array();
  for (const Candidate& c : candidates) {
    cmp.push_back({
        {"partitioner", to_string(c.method)},
        {"max_cost", c.partition.max_cost()},
        {"imbalance", c.partition.imbalance()},
        {"ratio_to_optimal", c.ratio_to_optimal},
        {"contiguous", c.partition.contiguous()},
    });
  }
  j["comparison"] = cmp;
  return j;
}

// One panel per partitioner, one bar per rank; all panels share the scale
// so bar heights compare across partitioners. A dashed line marks the mean.
std::string to_svg(
    const Workload& wl,
    const ShardPlan& plan,
    const std::vector<Candidate>& candidates) {
  const int64_t world = plan.options.world;
  const int panel_h = 140;
  const int plot_h = 90;
  const int left = 120;
  const int top = 50;
  const double bar_w =
      std::max(4.0, std::min(48.0, 720.0 / static_cast<double>(world)));
  const double width = left + bar_w * static_cast<double>(world) + 40;
  const double height = top + panel_h * static_cast<double>(candidates.size());
  double scale = 0.0;
  for (const Candidate& c : candidates) {
    scale = std::max(scale, c.partition.max_cost());
  }
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
    << "\" height=\"" << height << "\" font-family=\"monospace\" "
    << "font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"10\" y=\"20\" font-size=\"14\">frameshard plan: "
    << xml_escape(wl.name) << ", cp " << world << ", "
    << plan.frames.units.size() << " units, "
    << xml_escape(plan.options.cost.label) << "</text>\n";
  s << "<text x=\"10\" y=\"38\">per-rank cost (bar) and mean (dashed); "
       "shared scale, max "
    << fmt(scale, "%.4g") << "</text>\n";
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    const double y0 = top + panel_h * static_cast<double>(i);
    const double base = y0 + plot_h + 10;
    const bool optimal = c.method == Partitioner::kOptimal;
    s << "<g>\n<text x=\"10\" y=\"" << y0 + 40 << "\">" << to_string(c.method)
      << "</text>\n<text x=\"10\" y=\"" << y0 + 56 << "\">max/mean "
      << fmt(c.partition.imbalance(), "%.3f") << "</text>\n<text x=\"10\" y=\""
      << y0 + 72 << "\">x" << fmt(c.ratio_to_optimal, "%.3f")
      << " opt</text>\n";
    for (int64_t r = 0; r < world; ++r) {
      const double v = c.partition.rank_costs[static_cast<std::size_t>(r)];
      const double h = scale > 0 ? v / scale * plot_h : 0.0;
      const double x = left + bar_w * static_cast<double>(r);
      s << "<rect x=\"" << x + 1 << "\" y=\"" << base - h << "\" width=\""
        << bar_w - 2 << "\" height=\"" << h << "\" fill=\""
        << (optimal ? "#2b7bba" : "#999999") << "\"><title>rank " << r << ": "
        << fmt(v, "%.4g") << "</title></rect>\n";
      if (world <= 32) {
        s << "<text x=\"" << x + bar_w / 2 << "\" y=\"" << base + 14
          << "\" text-anchor=\"middle\" font-size=\"10\">" << r << "</text>\n";
      }
    }
    const double mean_y =
        scale > 0 ? base - c.partition.mean_cost() / scale * plot_h : base;
    s << "<line x1=\"" << left << "\" x2=\""
      << left + bar_w * static_cast<double>(world) << "\" y1=\"" << mean_y
      << "\" y2=\"" << mean_y
      << "\" stroke=\"#d62728\" stroke-dasharray=\"4,3\"/>\n"
      << "<line x1=\"" << left << "\" x2=\""
      << left + bar_w * static_cast<double>(world) << "\" y1=\"" << base
      << "\" y2=\"" << base << "\" stroke=\"black\"/>\n</g>\n";
  }
  s << "</svg>\n";
  return s.str();
}

// ------------------------------------------------------------------ run

void run_plan(const PlanArgs& args, const std::vector<std::string>& extras) {
  // Precedence: defaults < --config < dotted overrides < --cp,
  // --partitioner, --alpha.
  Config config;
  std::string policy_note;
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
  const ShardPlan plan = make_plan(wl.grid, opts);
  const std::vector<Candidate> candidates = compare_partitioners(plan);

  if (!args.svg.empty()) {
    std::ofstream out(args.svg, std::ios::binary);
    FRAMESHARD_CHECK(
        out.good(), "plan", "expected a writable --svg file, got ", args.svg);
    out << to_svg(wl, plan, candidates);
    FRAMESHARD_CHECK(
        out.good(),
        "plan",
        "expected to write --svg file ",
        args.svg,
        ", got a write error");
  }
  if (args.json) {
    std::cout
        << to_json_report(wl, origin, plan, policy_note, candidates).dump(2)
        << "\n";
  } else {
    print_human(std::cout, wl, origin, plan, policy_note, candidates);
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
      "overrides < --cp/--partitioner/--alpha.\n"
      "Dotted overrides take the config's key paths, e.g.\n"
      "  --distributed.multimodal.vision.frame_sharding.enabled false\n"
      "  --distributed.multimodal.vision.frame_sharding.min_tokens=0\n"
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
                            "Synthetic workload: doc | multi | video | mixed")
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
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_option("--svg", args->svg, "Write an SVG bar chart of the loads");
  sub->allow_extras();
  sub->callback([args, sub] { run_plan(*args, sub->remaining()); });
}

}  // namespace cli
}  // namespace frameshard
