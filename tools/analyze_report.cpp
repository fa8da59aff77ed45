#include "analyze_report.h"

#include <frameshard/xml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace frameshard {
namespace cli {

namespace {

// Repeated media (media_ids): each item once against every use, and what
// the plans covered.
void print_distinct(
    std::ostream& os, const AnalyzeContext& ctx, const WorkloadAnalysis& a) {
  if (a.distinct_frame_units == a.frame_units &&
      a.distinct_patch_rows == a.patch_rows) {
    return;
  }
  os << "  distinct: " << a.distinct_frame_units << "/" << a.frame_units
     << " frame units, " << a.distinct_patch_rows << "/" << a.patch_rows
     << " patch rows, " << a.distinct_tokens << "/" << a.tokens
     << " tokens (media_ids); planned over "
     << (ctx.dedup ? "the distinct units (frame_sharding.dedup true)"
                   : "every use (frame_sharding.dedup false)")
     << "\n";
}

// What the samples hold: "(3 images, 0 videos, 2 grid_thw rows, 1
// text-only)", the last two only when there are any.
std::string media_counts(const AnalyzeContext& ctx) {
  std::string out = "(" + std::to_string(ctx.images) + " images, " +
                    std::to_string(ctx.videos) + " videos";
  if (ctx.grid_rows > 0) {
    out += ", " + std::to_string(ctx.grid_rows) + " grid_thw rows";
  }
  if (ctx.text_only_samples > 0) {
    out += ", " + std::to_string(ctx.text_only_samples) + " text-only";
  }
  return out + ")";
}

// Batches of text-only samples: nothing to encode, so nothing to shard.
void print_without_media(std::ostream& os, const WorkloadAnalysis& a) {
  if (a.batches_without_media == 0) {
    return;
  }
  if (a.batches_without_media == a.batches) {
    os << "  no media in any batch (text-only samples): nothing to encode or "
          "shard, every speed-up is 1\n";
    return;
  }
  os << "  " << a.batches_without_media << " of " << a.batches
     << " batches without media (text-only samples): replicated with nothing "
        "to encode, counted as not sharded\n";
}

}  // namespace

void print_analysis(
    std::ostream& os, const AnalyzeContext& ctx, const WorkloadAnalysis& a) {
  if (ctx.preset.empty()) {
    os << "analyze " << ctx.manifest << ": " << ctx.samples << " samples "
       << media_counts(ctx) << " in " << a.batches << " batches of "
       << ctx.samples_per_batch << ", " << ctx.family << " processor\n";
  } else {
    os << "analyze preset " << ctx.preset << ", seeds " << ctx.seed << " to "
       << ctx.seed + static_cast<uint64_t>(a.batches) - 1 << ": " << a.batches
       << " batches (" << ctx.images << " images, " << ctx.videos
       << " videos), " << ctx.family << " cost model\n";
  }
  os << "  " << a.frame_units << " frame units, " << a.patch_rows
     << " patch rows, " << a.tokens << " visual tokens\n";
  print_without_media(os, a);
  print_distinct(os, ctx, a);
  os << "  policy " << describe_policy(ctx.plan.policy) << "; cost "
     << ctx.plan.cost.label << "\n"
     << "  speedup = replicated vision cost / sharded (slowest rank); "
        "+gather adds the modelled gather at "
     << ctx.plan.policy.gather_bandwidth_gbps
     << " GB/s; imbalance = slowest / mean rank; gather_MB per sharded "
        "batch\n";
  char line[160];
  std::snprintf(
      line,
      sizeof(line),
      "%4s %-8s %8s %8s %8s %9s %10s\n",
      "cp",
      "method",
      "sharded",
      "speedup",
      "+gather",
      "imbalance",
      "gather_MB");
  os << line;
  for (const CpSummary& row : a.rows) {
    for (const MethodSummary& m : row.methods) {
      std::snprintf(
          line,
          sizeof(line),
          "%4lld %-8s %7.0f%% %8.2f %8.2f %9.3f %10.2f\n",
          static_cast<long long>(row.cp),
          to_string(m.method).c_str(),
          m.shard_share * 100.0,
          m.speedup,
          m.speedup_gather,
          m.imbalance,
          m.gather_mb);
      os << line;
    }
  }
}

nlohmann::json analysis_json(
    const AnalyzeContext& ctx, const WorkloadAnalysis& a) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CpSummary& row : a.rows) {
    nlohmann::json methods = nlohmann::json::object();
    for (const MethodSummary& m : row.methods) {
      methods[to_string(m.method)] = {
          {"shard_share", m.shard_share},
          {"speedup", m.speedup},
          {"speedup_with_gather", m.speedup_gather},
          {"imbalance", m.imbalance},
          {"gather_mb_per_sharded_batch", m.gather_mb}};
    }
    rows.push_back({{"cp", row.cp}, {"partitioners", methods}});
  }
  nlohmann::json j = {
      {"family", ctx.family},
      {"samples", ctx.samples},
      {"samples_per_batch", ctx.samples_per_batch},
      {"images", ctx.images},
      {"videos", ctx.videos},
      {"grid_rows", ctx.grid_rows},
      {"text_only_samples", ctx.text_only_samples},
      {"batches", a.batches},
      {"batches_without_media", a.batches_without_media},
      {"frame_units", a.frame_units},
      {"patch_rows", a.patch_rows},
      {"tokens", a.tokens},
      {"policy", to_string(ctx.plan.policy.kind)},
      {"gather_bandwidth_gbps", ctx.plan.policy.gather_bandwidth_gbps},
      {"cost", ctx.plan.cost.label},
      {"distinct_frame_units", a.distinct_frame_units},
      {"distinct_patch_rows", a.distinct_patch_rows},
      {"distinct_tokens", a.distinct_tokens},
      {"dedup", ctx.dedup},
      {"rows", rows}};
  if (ctx.preset.empty()) {
    j["manifest"] = ctx.manifest;
  } else {
    j["preset"] = ctx.preset;
    j["seed"] = ctx.seed;
  }
  return j;
}

std::string analysis_svg(const AnalyzeContext& ctx, const WorkloadAnalysis& a) {
  const double w = 640, h = 400, left = 60, right = 150, top = 40, bottom = 50;
  double cp_max = 2.0;
  for (const CpSummary& row : a.rows) {
    cp_max = std::max(cp_max, static_cast<double>(row.cp));
  }
  // x: log2(cp) from 0 (CP 1) to log2(cp_max); y: speed-up 0..cp_max.
  auto x = [&](double cp) {
    return left + (w - left - right) * std::log2(cp) / std::log2(cp_max);
  };
  auto y = [&](double s) {
    return h - bottom - (h - top - bottom) * std::min(s, cp_max) / cp_max;
  };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w
    << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">"
    << xml_escape(
           "frameshard analyze " +
           (ctx.preset.empty() ? ctx.manifest : "preset " + ctx.preset) + " (" +
           ctx.family + ")")
    << "</text>\n";
  for (double cp = 1; cp <= cp_max; cp *= 2) {
    s << "<line x1=\"" << x(cp) << "\" y1=\"" << y(0) << "\" x2=\"" << x(cp)
      << "\" y2=\"" << y(cp_max) << "\" stroke=\"#ddd\"/>\n"
      << "<text x=\"" << x(cp) << "\" y=\"" << h - bottom + 16
      << "\" text-anchor=\"middle\">" << cp << "</text>\n";
  }
  s << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 12
    << "\" text-anchor=\"middle\">CP size</text>\n"
    << "<text x=\"16\" y=\"" << (top + h - bottom) / 2
    << "\" transform=\"rotate(-90 16 " << (top + h - bottom) / 2
    << ")\" text-anchor=\"middle\">vision speed-up with gather</text>\n"
    << "<line x1=\"" << x(1) << "\" y1=\"" << y(1) << "\" x2=\"" << x(cp_max)
    << "\" y2=\"" << y(cp_max)
    << "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = cp_max * k / 4;
    s << "<text x=\"" << left - 6 << "\" y=\"" << y(v) + 4
      << "\" text-anchor=\"end\">" << v << "</text>\n";
  }
  const std::size_t methods = a.rows.empty() ? 0 : a.rows[0].methods.size();
  for (std::size_t m = 0; m < methods; ++m) {
    s << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\""
      << kColors[m % 4] << "\" points=\"";
    for (const CpSummary& row : a.rows) {
      s << x(static_cast<double>(row.cp)) << ","
        << y(row.methods[m].speedup_gather) << " ";
    }
    s << "\"/>\n<text x=\"" << w - right + 10 << "\" y=\"" << top + 20 * m + 10
      << "\" fill=\"" << kColors[m % 4] << "\">"
      << xml_escape(to_string(a.rows[0].methods[m].method)) << "</text>\n";
  }
  s << "<text x=\"" << w - right + 10 << "\" y=\"" << top + 20 * methods + 10
    << "\" fill=\"#888\">ideal (CP-fold)</text>\n</svg>\n";
  return s.str();
}

}  // namespace cli
}  // namespace frameshard
