// Progress lines, summary tables and JSON of `train` and `ab`.
#include "train_report.h"

#include "online_report.h"

#include <frameshard/error.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace frameshard {
namespace cli {
namespace {

using train::StepMetrics;

template <typename F>
double max_over_ranks(const std::vector<StepMetrics>& ranks, F field) {
  double m = 0.0;
  for (const auto& r : ranks) {
    m = std::max(m, static_cast<double>(field(r)));
  }
  return m;
}

template <typename F>
double measured_mean(const ArmRecord& arm, F field) {
  const auto v = per_step_max(arm, field);
  const size_t first = v.size() >= 2 ? 1 : 0;
  double sum = 0.0;
  for (size_t i = first; i < v.size(); ++i) {
    sum += v[i];
  }
  return v.size() > first ? sum / static_cast<double>(v.size() - first) : 0.0;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string mib(int64_t bytes) {
  return fmt("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

std::string ratio_text(double a, double b) {
  return b > 0 ? fmt("%.3f", a / b) : "n/a";
}

// Mean over the measured steps of the gap between the slowest and the
// fastest replica, a replica's time being its slowest rank's.
template <typename F>
double replica_gap(const ArmRecord& arm, F field) {
  const size_t first = arm.steps.size() >= 2 ? 1 : 0;
  const auto cp = static_cast<size_t>(std::max<int64_t>(1, arm.cp));
  double sum = 0.0;
  for (size_t s = first; s < arm.steps.size(); ++s) {
    const auto& ranks = arm.steps[s];
    double lo = 0.0, hi = 0.0;
    for (size_t q = 0; q * cp < ranks.size(); ++q) {
      double t = 0.0;
      for (size_t r = q * cp; r < std::min(ranks.size(), (q + 1) * cp); ++r) {
        t = std::max(t, static_cast<double>(field(ranks[r])));
      }
      lo = q == 0 ? t : std::min(lo, t);
      hi = std::max(hi, t);
    }
    sum += hi - lo;
  }
  return arm.steps.size() > first
             ? sum / static_cast<double>(arm.steps.size() - first)
             : 0.0;
}

// DP replicas of the arm's job (1 when it recorded no step).
size_t replicas(const ArmRecord& arm) {
  const auto cp = static_cast<size_t>(std::max<int64_t>(1, arm.cp));
  return arm.steps.empty() ? 1 : arm.steps[0].size() / cp;
}

}  // namespace

ArmSummary summarize(const ArmRecord& arm) {
  ArmSummary s;
  s.measured_steps = static_cast<int64_t>(
      arm.steps.size() >= 2 ? arm.steps.size() - 1 : arm.steps.size());
  s.step_seconds =
      measured_mean(arm, [](const auto& m) { return m.step_seconds; });
  s.vision_seconds =
      measured_mean(arm, [](const auto& m) { return m.vision_seconds; });
  s.vision_cpu_seconds =
      measured_mean(arm, [](const auto& m) { return m.vision_cpu_seconds; });
  s.replica_gap_seconds =
      replica_gap(arm, [](const auto& m) { return m.vision_seconds; });
  s.replica_gap_cpu_seconds =
      replica_gap(arm, [](const auto& m) { return m.vision_cpu_seconds; });
  s.gather_seconds =
      measured_mean(arm, [](const auto& m) { return m.gather_seconds; });
  s.decoder_seconds =
      measured_mean(arm, [](const auto& m) { return m.decoder_seconds; });
  for (const auto& ranks : arm.steps) {
    s.peak_bytes_per_rank.resize(ranks.size(), 0);
    for (size_t r = 0; r < ranks.size(); ++r) {
      s.peak_bytes_per_rank[r] =
          std::max(s.peak_bytes_per_rank[r], ranks[r].peak_bytes);
      s.peak_bytes = std::max(s.peak_bytes, ranks[r].peak_bytes);
      s.vision_peak_bytes =
          std::max(s.vision_peak_bytes, ranks[r].vision_peak_bytes);
    }
  }
  for (const auto& ranks : arm.steps) {
    for (const auto& r : ranks) {
      s.visual_bytes_total += r.visual_bytes_received;
      s.allgather_bytes_total += r.allgather_bytes_received;
    }
  }
  s.visual_bytes_per_step =
      measured_mean(arm, [](const auto& m) { return m.visual_bytes_received; });
  if (!arm.steps.empty()) {
    for (const auto& r : arm.steps.back()) {
      s.tower_rows_per_rank.push_back(r.tower_rows);
    }
    s.plan_path = arm.steps.back().front().plan_path;
  }
  s.hash_seconds =
      measured_mean(arm, [](const auto& m) { return m.hash_seconds; });
  for (const auto& ranks : arm.steps) {
    using M = StepMetrics;
    s.frames_total +=
        static_cast<double>(job_count(arm, ranks, &M::frames_total));
    s.frames_distinct +=
        static_cast<double>(job_count(arm, ranks, &M::frames_distinct));
    s.rows_total += static_cast<double>(job_count(arm, ranks, &M::rows_total));
    s.rows_distinct +=
        static_cast<double>(job_count(arm, ranks, &M::rows_distinct));
  }
  for (const auto& ranks : arm.steps) {
    const StepMetrics& m = ranks.front();  // the same on every rank
    s.mesh_steps += m.mesh_mode == "mesh" ? 1 : 0;
    s.cp_only_steps += m.mesh_mode == "cp-only" ? 1 : 0;
    s.mesh_gain += m.mesh_gain;
  }
  if (s.mesh_steps + s.cp_only_steps > 0) {
    s.mesh_gain /= static_cast<double>(s.mesh_steps + s.cp_only_steps);
  }
  const double steps =
      static_cast<double>(std::max<size_t>(1, arm.steps.size()));
  s.frames_total /= steps;
  s.frames_distinct /= steps;
  s.rows_total /= steps;
  s.rows_distinct /= steps;
  return s;
}

int64_t job_count(
    const ArmRecord& arm,
    const std::vector<StepMetrics>& ranks,
    int64_t StepMetrics::*field) {
  const auto cp = static_cast<size_t>(std::max<int64_t>(1, arm.cp));
  int64_t n = 0;
  for (size_t r = 0; r < ranks.size(); r += cp) {
    n += ranks[r].*field;
  }
  return n;
}

std::string progress_line(
    const std::string& arm,
    const std::vector<StepMetrics>& ranks,
    int64_t total_steps,
    bool dedup,
    int64_t cp) {
  FRAMESHARD_CHECK(!ranks.empty(), "progress_line", "expected ranks, got none");
  const StepMetrics& m = ranks.front();
  constexpr int kWidth = 20;
  const int64_t done = m.step + 1;
  const int filled =
      static_cast<int>(kWidth * done / std::max<int64_t>(1, total_steps));
  std::string bar(static_cast<size_t>(kWidth + 2), '-');
  bar.front() = '[';
  bar.back() = ']';
  bar.replace(1, static_cast<size_t>(filled), static_cast<size_t>(filled), '#');
  std::string peaks;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (r > 0) {
      peaks.push_back('/');
    }
    peaks.append(
        fmt("%.1f", static_cast<double>(ranks[r].peak_bytes) / 1048576.0));
  }
  char buf[256];
  std::snprintf(
      buf,
      sizeof(buf),
      "%s step %lld/%lld %-10s loss %.6f  step %.3f s  vision %.3f s  "
      "gather %.3f s  peak MiB per rank %s",
      bar.c_str(),
      static_cast<long long>(done),
      static_cast<long long>(total_steps),
      arm.c_str(),
      m.loss,
      max_over_ranks(ranks, [](const auto& x) { return x.step_seconds; }),
      max_over_ranks(ranks, [](const auto& x) { return x.vision_seconds; }),
      max_over_ranks(ranks, [](const auto& x) { return x.gather_seconds; }),
      peaks.c_str());
  std::string line = buf;
  if (!m.mesh_mode.empty()) {
    line += "  " + m.mesh_mode;
    if (m.mesh_gain != 0.0) {
      line += fmt(" (gain %.2f)", m.mesh_gain);
    }
  }
  if (dedup) {
    ArmRecord job;
    job.cp = cp;
    line +=
        "  frames " +
        std::to_string(job_count(job, ranks, &StepMetrics::frames_distinct)) +
        "/" +
        std::to_string(job_count(job, ranks, &StepMetrics::frames_total)) +
        " distinct";
  }
  return line + online_step_text(m);
}

namespace {

// "41/328 (0.125)": a step's distinct over total count, and their ratio.
std::string distinct_text(double distinct, double total, bool with_ratio) {
  std::string t = fmt("%.0f", distinct) + "/" + fmt("%.0f", total);
  return with_ratio && total > 0 ? t + " (" + ratio_text(distinct, total) + ")"
                                 : t;
}

void ab_row(
    std::ostream& os,
    const char* name,
    const std::string& a,
    const std::string& b,
    const std::string& q) {
  char buf[160];
  std::snprintf(
      buf,
      sizeof(buf),
      "  %-18s %14s %14s %8s\n",
      name,
      a.c_str(),
      b.c_str(),
      q.c_str());
  os << buf;
}

// The job's distinct and total frames and rows per step of both arms; the
// ratio is the second arm's distinct over the first's.
void print_distinct_rows(
    std::ostream& os, const ArmSummary& r, const ArmSummary& s) {
  ab_row(
      os,
      "frames distinct",
      distinct_text(r.frames_distinct, r.frames_total, false),
      distinct_text(s.frames_distinct, s.frames_total, false),
      ratio_text(s.frames_distinct, r.frames_distinct));
  ab_row(
      os,
      "rows distinct",
      distinct_text(r.rows_distinct, r.rows_total, false),
      distinct_text(s.rows_distinct, s.rows_total, false),
      ratio_text(s.rows_distinct, r.rows_distinct));
}

}  // namespace

void print_train_summary(std::ostream& os, const ArmRecord& arm) {
  const ArmSummary s = summarize(arm);
  os << "\nsummary (" << arm.name << ", vision path " << s.plan_path
     << "; means over " << s.measured_steps
     << " steps after the warm-up, slowest rank per step)\n";
  os << "  step time        " << fmt("%.3f s", s.step_seconds) << "\n";
  os << "  vision time      " << fmt("%.3f s", s.vision_seconds)
     << "  (tower forward + backward)\n";
  os << "  vision CPU time  " << fmt("%.3f s", s.vision_cpu_seconds)
     << "  (the rank thread's)\n";
  if (replicas(arm) > 1) {
    os << "  replica gap      " << fmt("%.3f s", s.replica_gap_seconds)
       << fmt(" (CPU %.3f s; slowest - fastest DP replica)\n",
              s.replica_gap_cpu_seconds);
  }
  os << "  gather time      " << fmt("%.3f s", s.gather_seconds) << "\n";
  if (arm.dedup) {
    os << "  hash time        " << fmt("%.3f s", s.hash_seconds)
       << "  (frame_keys)\n";
  }
  os << "  decoder time     " << fmt("%.3f s", s.decoder_seconds) << "\n";
  if (s.mesh_steps + s.cp_only_steps > 0) {
    os << "  mesh steps       " << s.mesh_steps << " pooled, "
       << s.cp_only_steps << " cp-only"
       << fmt(" (mean predicted gain %.3f)\n", s.mesh_gain);
  }
  os << "  frames           "
     << distinct_text(s.frames_distinct, s.frames_total, true)
     << " distinct per step, rows "
     << distinct_text(s.rows_distinct, s.rows_total, true) << "\n";
  os << "  peak bytes       " << mib(s.peak_bytes) << "\n";
  os << "  vision peak      " << mib(s.vision_peak_bytes) << "\n";
  os << "  visual bytes in  "
     << mib(static_cast<int64_t>(s.visual_bytes_per_step)) << " per step";
  if (s.allgather_bytes_total > 0) {
    os << " ("
       << ratio_text(
              static_cast<double>(s.visual_bytes_total),
              static_cast<double>(s.allgather_bytes_total))
       << " of the all-gather's)";
  }
  os << "\n";
  os << "  rank  tower rows  peak\n";
  for (size_t r = 0; r < s.peak_bytes_per_rank.size(); ++r) {
    char buf[128];
    std::snprintf(
        buf,
        sizeof(buf),
        "  %4zu  %10lld  %s\n",
        r,
        static_cast<long long>(
            r < s.tower_rows_per_rank.size() ? s.tower_rows_per_rank[r] : 0),
        mib(s.peak_bytes_per_rank[r]).c_str());
    os << buf;
  }
  print_online_summary(os, arm);
  if (!arm.steps.empty()) {
    os << "  final loss       " << fmt("%.6f", arm.steps.back().front().loss)
       << "\n";
  }
}

train::PlotSeries plot_series(const ArmRecord& arm) {
  train::PlotSeries p{arm.name, {}, {}};
  for (const auto& ranks : arm.steps) {
    p.loss.push_back(ranks.front().loss);
  }
  p.step_seconds =
      per_step_max(arm, [](const auto& m) { return m.step_seconds; });
  return p;
}

double loss_max_abs_diff(const ArmRecord& a, const ArmRecord& b) {
  FRAMESHARD_CHECK(
      a.steps.size() == b.steps.size(),
      "ab",
      "expected both arms to run the same steps, got ",
      a.steps.size(),
      " and ",
      b.steps.size());
  double d = 0.0;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    d = std::max(
        d, std::abs(a.steps[s].front().loss - b.steps[s].front().loss));
  }
  return d;
}

void print_ab_summary(
    std::ostream& os, const ArmRecord& replicated, const ArmRecord& sharded) {
  const ArmSummary r = summarize(replicated);
  const ArmSummary s = summarize(sharded);
  os << "\nA/B summary (means over " << s.measured_steps
     << " steps after the warm-up, slowest rank per step; ratio = "
     << sharded.name << " / " << replicated.name
     << "; frames and rows: the job's distinct/total per step)\n";
  auto row = [&os](
                 const char* name,
                 const std::string& a,
                 const std::string& b,
                 const std::string& q) { ab_row(os, name, a, b, q); };
  row("", replicated.name, sharded.name, "ratio");
  auto secs = [](double v) { return fmt("%.3f s", v); };
  row("vision time",
      secs(r.vision_seconds),
      secs(s.vision_seconds),
      ratio_text(s.vision_seconds, r.vision_seconds));
  row("vision CPU time",
      secs(r.vision_cpu_seconds),
      secs(s.vision_cpu_seconds),
      ratio_text(s.vision_cpu_seconds, r.vision_cpu_seconds));
  if (replicas(replicated) > 1) {
    row("replica gap",
        secs(r.replica_gap_seconds),
        secs(s.replica_gap_seconds),
        "");
    row("replica gap (CPU)",
        secs(r.replica_gap_cpu_seconds),
        secs(s.replica_gap_cpu_seconds),
        "");
  }
  row("step time",
      secs(r.step_seconds),
      secs(s.step_seconds),
      ratio_text(s.step_seconds, r.step_seconds));
  row("gather time", secs(r.gather_seconds), secs(s.gather_seconds), "");
  if (replicated.dedup || sharded.dedup) {
    row("hash time", secs(r.hash_seconds), secs(s.hash_seconds), "");
  }
  row("decoder time", secs(r.decoder_seconds), secs(s.decoder_seconds), "");
  print_distinct_rows(os, r, s);
  row("peak bytes",
      mib(r.peak_bytes),
      mib(s.peak_bytes),
      ratio_text(
          static_cast<double>(s.peak_bytes),
          static_cast<double>(r.peak_bytes)));
  row("vision peak bytes",
      mib(r.vision_peak_bytes),
      mib(s.vision_peak_bytes),
      ratio_text(
          static_cast<double>(s.vision_peak_bytes),
          static_cast<double>(r.vision_peak_bytes)));
  row("visual bytes in",
      mib(static_cast<int64_t>(r.visual_bytes_per_step)),
      mib(static_cast<int64_t>(s.visual_bytes_per_step)),
      s.allgather_bytes_total > 0
          ? ratio_text(
                static_cast<double>(s.visual_bytes_total),
                static_cast<double>(s.allgather_bytes_total)) +
                "*"
          : "");
  os << "  vision path: " << replicated.name << " arm " << r.plan_path << ", "
     << sharded.name << " arm " << s.plan_path
     << (sharded.dedup ? " (dedup)" : "") << "\n";
  if (s.mesh_steps + s.cp_only_steps > 0) {
    os << "  mesh steps: " << sharded.name << " arm " << s.mesh_steps
       << " pooled, " << s.cp_only_steps << " cp-only"
       << fmt(" (mean predicted gain %.3f)\n", s.mesh_gain);
  }
  print_online_summary(os, sharded);
  if (s.allgather_bytes_total > 0) {
    os << "  * visual bytes in: received over what the all-gather would move "
          "(all steps and ranks)\n";
  }
  os << "  largest per-step loss difference: "
     << fmt("%.3g", loss_max_abs_diff(replicated, sharded)) << "\n";
}

}  // namespace cli
}  // namespace frameshard
