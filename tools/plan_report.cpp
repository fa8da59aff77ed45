// The report of `frameshard plan`: the per-rank table, the JSON object and
// the SVG chart (tools/plan_report.h). A batch without media (text-only
// samples of plan --manifest) reports "no media" and all-zero ranks.
#include "plan_report.h"
#include "pieces_report.h"

#include <frameshard/error.h>
#include <frameshard/xml.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace frameshard {
namespace cli {
namespace {

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

// The whole frames' cost over cp: the mean of every unsplit partition, and
// what a split plan's max/mean is measured against.
double frames_mean(const ShardPlan& plan) {
  double total = 0.0;
  for (double c : plan.unit_costs) {
    total += c;
  }
  return total / static_cast<double>(plan.options.world);
}

}  // namespace

double lower_bound_cost(const ShardPlan& plan) {
  double largest = 0.0;
  for (double c : plan.unit_costs) {
    largest = std::max(largest, c);
  }
  return std::max(largest, frames_mean(plan));
}

ExchangeVolume exchange_volume(const ShardPlan& plan, const TowerDims& tower) {
  ExchangeVolume v;
  for (const RankShard& r : plan.ranks) {
    v.rows += r.exchange_rows;
  }
  v.mib = static_cast<double>(v.rows) * 2.0 *
          static_cast<double>(tower.hidden) * 2.0 *
          static_cast<double>(tower.full_layers()) / (1024.0 * 1024.0);
  return v;
}

// ------------------------------------------------------------- output

namespace {

void print_header(std::ostream& os, const PlanReport& rep) {
  const ShardPlan& plan = rep.plan;
  const FrameSet& f = plan.frames;
  os << "workload     " << rep.workload.name << " (" << rep.origin
     << "): " << grouped(static_cast<int64_t>(f.grid.size())) << " media, "
     << grouped(static_cast<int64_t>(f.units.size())) << " frame units, "
     << grouped(f.total_tokens) << " tokens, " << grouped(f.total_patch_rows)
     << " patch rows\n";
  os << "cost model   " << plan.options.cost.label << "\n";
  os << "plan         cp " << plan.options.world << ", partitioner "
     << to_string(plan.options.partitioner) << ", min_local_patch_rows "
     << plan.options.min_local_patch_rows << ", split_frames "
     << (plan.options.split.enabled ? "true" : "false") << ", fingerprint "
     << fingerprint_hex(plan.fingerprint) << "\n";
  if (rep.dedup.units > 0) {
    const FrameDedup& d = rep.dedup;
    os << "dedup        frames " << grouped(d.distinct_units) << "/"
       << grouped(d.units) << " distinct, rows "
       << grouped(d.distinct_patch_rows) << "/" << grouped(d.patch_rows)
       << ", tokens " << grouped(d.distinct_tokens) << "/" << grouped(d.tokens)
       << " (media_ids); planned over "
       << (rep.planned_distinct
               ? "the distinct units (frame_sharding.dedup true)"
               : "every use (frame_sharding.dedup false)")
       << "\n";
  }
  os << "policy       " << rep.policy_note << "; "
     << describe_policy(plan.options.policy) << "\n";
  os << "path         " << to_string(plan.path) << " (" << plan.reason << ")\n";
  if (f.units.empty()) {
    // Text-only samples (plan --manifest): every rank is idle either way.
    os << "             no media in this batch (text-only samples): no rank "
          "encodes anything\n";
  } else if (!plan.sharded()) {
    os << "             the partition below is what sharding over cp "
       << plan.options.world << " would do\n";
  }
  os << "\n";
}

// A split frame's pieces and the K/V rows its holder receives.
void print_pieces(std::ostream& os, const FrameSet& f, const RankShard& r) {
  for (const FramePiece& p : r.pieces) {
    const int64_t unit = r.units[static_cast<std::size_t>(p.frame)];
    os << "      piece  unit " << unit << " rows [" << grouped(p.begin) << ", "
       << grouped(p.end) << ") of "
       << grouped(f.units[static_cast<std::size_t>(unit)].patch_rows) << "\n";
  }
  if (r.exchange_rows > 0) {
    os << "      exchange " << grouped(r.exchange_rows)
       << " K/V rows received per full-attention layer\n";
  }
}

void print_ranks(std::ostream& os, const ShardPlan& plan) {
  const Partition& part = plan.partition;
  const double total = part.mean_cost() * static_cast<double>(part.world);
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
    print_pieces(os, plan.frames, r);
  }
}

// Max/mean with and without splitting, both over the whole frames' mean
// cost, and the exchange the split costs.
void print_split(std::ostream& os, const PlanReport& rep) {
  const ShardPlan& plan = rep.plan;
  const double mean = frames_mean(plan);
  auto ratio = [mean](double v) { return mean > 0 ? v / mean : 1.0; };
  if (!plan.split) {
    os << "split        no frame cut: "
       << (plan.sharded() ? "cutting frames does not lower the bottleneck "
                            "on this cost model"
                          : "the replicated path runs whole frames")
       << "\n";
    return;
  }
  const ExchangeVolume v = exchange_volume(plan, rep.tower);
  int64_t cut = 0;
  for (const RankShard& r : plan.ranks) {
    cut += static_cast<int64_t>(r.pieces.size());
  }
  os << "split        max/mean "
     << fmt(ratio(plan.partition.max_cost()), "%.4f") << " with frames cut, "
     << fmt(ratio(plan.unsplit_max_cost), "%.4f") << " without (max "
     << fmt(plan.partition.max_cost(), "%.4g") << " against "
     << fmt(plan.unsplit_max_cost, "%.4g") << "; mean = whole "
     << "frames' cost / cp)\n"
     << "             " << cut << " pieces; work + exchange / cp = "
     << fmt(ratio(plan.partition.mean_cost()), "%.4f") << " x mean\n"
     << "exchange     " << grouped(v.rows)
     << " K/V rows per full-attention layer (all ranks): " << fmt(v.mib, "%.1f")
     << " MiB per forward at " << rep.tower.name << " width "
     << rep.tower.hidden << ", bf16 K and V, " << rep.tower.full_layers()
     << " full layers\n";
}

}  // namespace

void print_plan(std::ostream& os, const PlanReport& rep) {
  const ShardPlan& plan = rep.plan;
  const Partition& part = plan.partition;
  print_header(os, rep);
  print_ranks(os, plan);
  const double bound = lower_bound_cost(plan);
  const double mean = frames_mean(plan);
  os << "\nbalance      max " << fmt(part.max_cost(), "%.4g") << ", mean "
     << fmt(part.mean_cost(), "%.4g") << ", max/mean "
     << fmt(part.imbalance(), "%.4f") << "\n";
  if (plan.options.split.enabled) {
    print_split(os, rep);
  }
  os << "lower bound  " << fmt(bound, "%.4g")
     << " = max(largest unit, mean): max/mean "
     << fmt(mean > 0 ? bound / mean : 1.0, "%.4f")
     << (plan.split ? " without cutting frames (1 with)" : "") << "\n\n";

  // lpt is not contiguous (its gather needs a permutation), so it can beat
  // the contiguous optimum; the table says which rows are comparable.
  os << "partitioner  bottleneck  max/mean  vs optimal  layout\n";
  for (const Candidate& c : rep.candidates) {
    const bool chosen = c.method == plan.options.partitioner && !plan.split;
    os << pad_right(to_string(c.method) + (chosen ? " *" : ""), 11) << "  "
       << pad_left(fmt(c.partition.max_cost(), "%.4g"), 10) << "  "
       << pad_left(fmt(c.partition.imbalance(), "%.4f"), 8) << "  "
       << pad_left(fmt(c.ratio_to_optimal, "%.4f"), 10) << "  "
       << (c.partition.contiguous() ? "contiguous" : "permuted") << "\n";
  }
  if (plan.split) {
    const double best = plan.unsplit_max_cost;
    os << pad_right("split *", 11) << "  "
       << pad_left(fmt(part.max_cost(), "%.4g"), 10) << "  "
       << pad_left(fmt(mean > 0 ? part.max_cost() / mean : 1.0, "%.4f"), 8)
       << "  "
       << pad_left(fmt(best > 0 ? part.max_cost() / best : 1.0, "%.4f"), 10)
       << "  contiguous, frames cut\n";
  }
}

namespace {

// Per rank: its rows, cost and local frames, and the pieces of split frames.
nlohmann::json ranks_json(const ShardPlan& plan) {
  const Partition& part = plan.partition;
  const double total = part.mean_cost() * static_cast<double>(part.world);
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
        {"pieces", pieces_json(plan, r)},
        {"exchange_rows", r.exchange_rows},
    });
  }
  return ranks;
}

}  // namespace

nlohmann::json plan_json(const PlanReport& rep) {
  const ShardPlan& plan = rep.plan;
  const FrameSet& f = plan.frames;
  const Partition& part = plan.partition;
  nlohmann::json j;
  j["workload"] = rep.workload.name;
  j["origin"] = rep.origin;
  j["cp"] = plan.options.world;
  j["partitioner"] = to_string(plan.options.partitioner);
  j["cost_model"] = plan.options.cost.label;
  j["effective_alpha"] = plan.options.cost.effective_alpha();
  j["min_local_patch_rows"] = plan.options.min_local_patch_rows;
  const PolicyOptions& policy = plan.options.policy;
  j["policy"] = {
      {"enabled", policy.enabled},
      {"kind", to_string(policy.kind)},
      {"note", rep.policy_note}};
  // Only the fields the policy's kind reads.
  if (policy.kind == PolicyKind::kThreshold) {
    j["policy"]["min_tokens"] = policy.min_tokens;
    j["policy"]["min_frames"] = policy.min_frames;
  } else {
    j["policy"]["gather_bandwidth_gbps"] = policy.gather_bandwidth_gbps;
    j["policy"]["gather_row_bytes"] = policy.gather_row_bytes;
  }
  j["path"] = to_string(plan.path);
  j["reason"] = plan.reason;
  j["media"] = f.grid.size();
  j["no_media"] = f.units.empty();  // text-only samples: nothing to encode
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
  j["split_frames"] = plan.options.split.enabled;
  j["split"] = plan.split;
  j["unsplit_max_cost"] = plan.unsplit_max_cost;
  j["frames_mean_cost"] = frames_mean(plan);
  const ExchangeVolume v = exchange_volume(plan, rep.tower);
  j["exchange_rows"] = v.rows;
  j["exchange_mib"] = v.mib;
  j["ranks"] = ranks_json(plan);
  if (rep.dedup.units > 0) {
    const FrameDedup& d = rep.dedup;
    j["dedup"] = {
        {"planned_distinct", rep.planned_distinct},
        {"frames_total", d.units},
        {"frames_distinct", d.distinct_units},
        {"rows_total", d.patch_rows},
        {"rows_distinct", d.distinct_patch_rows},
        {"tokens_total", d.tokens},
        {"tokens_distinct", d.distinct_tokens}};
  }
  j["gather_counts"] = plan.gather_counts;
  j["fingerprint"] = fingerprint_hex(plan.fingerprint);
  nlohmann::json cmp = nlohmann::json::array();
  for (const Candidate& c : rep.candidates) {
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

namespace {

// One panel of the chart: a bar per rank (its exchange part, if any, in
// orange on top) and a dashed line at `mean`.
struct Panel {
  std::string label;
  double imbalance = 1.0;
  double ratio_to_optimal = 1.0;
  std::vector<double> costs;
  std::vector<double> exchange;  // empty or one per rank
  double mean = 0.0;
  const char* fill = "#999999";
};

void draw_panel(
    std::ostringstream& s,
    const Panel& p,
    double y0,
    double scale,
    double bar_w) {
  const int plot_h = 90;
  const int left = 120;
  const double base = y0 + plot_h + 10;
  const int64_t world = static_cast<int64_t>(p.costs.size());
  s << "<g>\n<text x=\"10\" y=\"" << y0 + 40 << "\">" << p.label
    << "</text>\n<text x=\"10\" y=\"" << y0 + 56 << "\">max/mean "
    << fmt(p.imbalance, "%.3f") << "</text>\n<text x=\"10\" y=\"" << y0 + 72
    << "\">x" << fmt(p.ratio_to_optimal, "%.3f") << " opt</text>\n";
  for (int64_t r = 0; r < world; ++r) {
    const double v = p.costs[static_cast<std::size_t>(r)];
    const double h = scale > 0 ? v / scale * plot_h : 0.0;
    const double x = left + bar_w * static_cast<double>(r);
    s << "<rect x=\"" << x + 1 << "\" y=\"" << base - h << "\" width=\""
      << bar_w - 2 << "\" height=\"" << h << "\" fill=\"" << p.fill
      << "\"><title>rank " << r << ": " << fmt(v, "%.4g")
      << "</title></rect>\n";
    if (!p.exchange.empty() && p.exchange[static_cast<std::size_t>(r)] > 0) {
      const double xv = p.exchange[static_cast<std::size_t>(r)];
      const double xh = scale > 0 ? xv / scale * plot_h : 0.0;
      s << "<rect x=\"" << x + 1 << "\" y=\"" << base - h << "\" width=\""
        << bar_w - 2 << "\" height=\"" << xh
        << "\" fill=\"#f28e2b\"><title>rank " << r
        << " K/V exchange: " << fmt(xv, "%.4g") << "</title></rect>\n";
    }
    if (world <= 32) {
      s << "<text x=\"" << x + bar_w / 2 << "\" y=\"" << base + 14
        << "\" text-anchor=\"middle\" font-size=\"10\">" << r << "</text>\n";
    }
  }
  const double right = left + bar_w * static_cast<double>(world);
  const double mean_y = scale > 0 ? base - p.mean / scale * plot_h : base;
  s << "<line x1=\"" << left << "\" x2=\"" << right << "\" y1=\"" << mean_y
    << "\" y2=\"" << mean_y
    << "\" stroke=\"#d62728\" stroke-dasharray=\"4,3\"/>\n"
    << "<line x1=\"" << left << "\" x2=\"" << right << "\" y1=\"" << base
    << "\" y2=\"" << base << "\" stroke=\"black\"/>\n</g>\n";
}

}  // namespace

// One panel per partitioner (and one for the split plan, its K/V exchange
// in orange), one bar per rank; all panels share the scale so bar heights
// compare across partitioners. A dashed line marks the whole frames' mean.
std::string plan_svg(const PlanReport& rep) {
  const ShardPlan& plan = rep.plan;
  const int64_t world = plan.options.world;
  std::vector<Panel> panels;
  for (const Candidate& c : rep.candidates) {
    Panel p;
    p.label = to_string(c.method);
    p.imbalance = c.partition.imbalance();
    p.ratio_to_optimal = c.ratio_to_optimal;
    p.costs = c.partition.rank_costs;
    p.mean = c.partition.mean_cost();
    p.fill = traits(c.method).exact && !plan.split ? "#2b7bba" : "#999999";
    panels.push_back(std::move(p));
  }
  if (plan.split) {
    Panel p;
    p.label = "split";
    p.mean = frames_mean(plan);
    p.imbalance = p.mean > 0 ? plan.partition.max_cost() / p.mean : 1.0;
    p.ratio_to_optimal = plan.partition.max_cost() / plan.unsplit_max_cost;
    p.costs = plan.partition.rank_costs;
    for (const RankShard& r : plan.ranks) {
      p.exchange.push_back(
          plan.options.split.exchange_row_cost *
          static_cast<double>(r.exchange_rows));
    }
    p.fill = "#2b7bba";
    panels.push_back(std::move(p));
  }
  const int panel_h = 140;
  const int top = 50;
  const double bar_w =
      std::max(4.0, std::min(48.0, 720.0 / static_cast<double>(world)));
  const double width = 120 + bar_w * static_cast<double>(world) + 40;
  const double height = top + panel_h * static_cast<double>(panels.size());
  double scale = 0.0;
  for (const Panel& p : panels) {
    for (double v : p.costs) {
      scale = std::max(scale, v);
    }
  }
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
    << "\" height=\"" << height << "\" font-family=\"monospace\" "
    << "font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"10\" y=\"20\" font-size=\"14\">frameshard plan: "
    << xml_escape(rep.workload.name) << ", cp " << world << ", "
    << plan.frames.units.size() << " units, "
    << xml_escape(plan.options.cost.label) << "</text>\n";
  s << "<text x=\"10\" y=\"38\">per-rank cost (bar) and mean (dashed); "
       "shared scale, max "
    << fmt(scale, "%.4g") << "</text>\n";
  for (std::size_t i = 0; i < panels.size(); ++i) {
    draw_panel(
        s, panels[i], top + panel_h * static_cast<double>(i), scale, bar_w);
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace cli
}  // namespace frameshard
