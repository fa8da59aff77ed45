// The online cost model (frameshard/online_cost.h): the window's fit with
// outliers rejected, and the rules that decide when it replaces the model
// in force.
#include <frameshard/error.h>
#include <frameshard/online_cost.h>
#include "core/nnls.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace frameshard {

namespace {

detail::FeatureRow features(const WorkloadSample& s) {
  return {s.sum_p2, s.sum_p, s.frames, s.calls, s.split_calls, s.exchange_rows};
}

void check_samples(const char* fn, const std::vector<WorkloadSample>& samples) {
  FRAMESHARD_CHECK(
      !samples.empty(), fn, "expected at least one sample, got none");
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const WorkloadSample& s = samples[i];
    FRAMESHARD_CHECK(
        std::isfinite(s.seconds) && s.seconds > 0.0,
        fn,
        "expected samples[",
        i,
        "].seconds finite and > 0, got ",
        s.seconds);
    const std::pair<const char*, double> named[] = {
        {"sum_p2", s.sum_p2},
        {"sum_p", s.sum_p},
        {"frames", s.frames},
        {"calls", s.calls},
        {"split_calls", s.split_calls},
        {"exchange_rows", s.exchange_rows},
        {"flop_cost", s.flop_cost}};
    for (const auto& [name, v] : named) {
      FRAMESHARD_CHECK(
          std::isfinite(v) && v >= 0.0,
          fn,
          "expected samples[",
          i,
          "].",
          name,
          " finite and >= 0, got ",
          v);
    }
  }
}

double rms_error(
    const std::vector<WorkloadSample>& samples, const WorkloadFit& fit) {
  double sum = 0.0;
  for (const WorkloadSample& s : samples) {
    const double e = fit.predict(s) / s.seconds - 1.0;
    sum += e * e;
  }
  return std::sqrt(sum / static_cast<double>(samples.size()));
}

// The NNLS fit of `samples` (checked, non-empty) as a WorkloadFit.
WorkloadFit fit_once(const std::vector<WorkloadSample>& samples) {
  std::vector<detail::FeatureRow> rows;
  std::vector<double> seconds;
  for (const WorkloadSample& s : samples) {
    rows.push_back(features(s));
    seconds.push_back(s.seconds);
  }
  const detail::FeatureRow x =
      detail::nnls_relative(rows, seconds, detail::kMaxFeatures).x;
  WorkloadFit fit;
  fit.model = CostModel::quadratic(x[0], x[1], x[2]);
  fit.per_call = x[3];
  fit.exchange_fixed = x[4];
  fit.exchange_row = x[5];
  fit.fitted = true;
  fit.used = static_cast<int64_t>(samples.size());
  fit.rms_relative_error = rms_error(samples, fit);
  return fit;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The FLOP model at its best seconds per unit on `samples` (least squares on
// relative errors: sum (s f / t - 1)^2 is least at s = sum(f/t) /
// sum((f/t)^2)).
WorkloadFit scaled_flops(const std::vector<WorkloadSample>& samples) {
  double num = 0.0, den = 0.0;
  for (const WorkloadSample& s : samples) {
    const double r = s.flop_cost / s.seconds;
    num += r;
    den += r * r;
  }
  WorkloadFit flops;
  flops.flop_seconds_per_unit = den > 0.0 ? num / den : 0.0;
  return flops;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * v);
  return buf;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

WorkloadSample workload_sample(
    const std::vector<int64_t>& unit_rows,
    const CostModel& flops,
    bool split,
    double seconds) {
  WorkloadSample s;
  for (const int64_t p : unit_rows) {
    const double d = static_cast<double>(p);
    s.sum_p2 += d * d;
    s.sum_p += d;
    s.frames += 1.0;
    s.flop_cost += flops(p);
  }
  s.calls = unit_rows.empty() ? 0.0 : 1.0;
  s.split_calls = split ? 1.0 : 0.0;
  s.seconds = seconds;
  return s;
}

WorkloadSample call_workload(
    const std::vector<int64_t>& cu,
    const std::vector<GridThw>& grid,
    const std::vector<FramePiece>& pieces,
    const CostModel& flops,
    bool split,
    double seconds) {
  const std::vector<int64_t> rows = segment_rows(cu);
  WorkloadSample s = workload_sample(rows, flops, split, seconds);
  if (pieces.empty()) {
    return s;
  }
  const std::vector<int64_t> whole = segment_rows(frame_offsets(grid));
  for (size_t i = 0; i < pieces.size(); ++i) {
    const FramePiece& piece = pieces[i];
    const auto f = static_cast<size_t>(piece.frame);
    FRAMESHARD_CHECK(
        piece.frame >= 0 && f < rows.size() && f < whole.size() &&
            rows[f] == piece.rows() && whole[f] >= piece.rows(),
        "call_workload",
        "expected pieces[",
        i,
        "] (frame ",
        piece.frame,
        ", rows [",
        piece.begin,
        ", ",
        piece.end,
        ")) to be a local frame's segment within its grid row, got ",
        f < rows.size() ? std::to_string(rows[f]) : std::string("no"),
        " segment rows and ",
        f < whole.size() ? std::to_string(whole[f]) : std::string("no"),
        " frame rows");
    // Counted above as a frame of q rows; as the split planner costs it,
    // its queries attend to all p rows and it receives the other p - q.
    const double q = static_cast<double>(rows[f]);
    const double p = static_cast<double>(whole[f]);
    s.sum_p2 += q * p - q * q;
    s.exchange_rows += p - q;
    s.flop_cost +=
        flops.c + q * (flops(whole[f]) - flops.c) / p - flops(rows[f]);
  }
  return s;
}

std::vector<int64_t> segment_rows(const std::vector<int64_t>& cu) {
  std::vector<int64_t> rows;
  for (std::size_t i = 1; i < cu.size(); ++i) {
    rows.push_back(cu[i] - cu[i - 1]);
  }
  return rows;
}

WorkloadSample rank_workload(
    const ShardPlan& plan,
    int64_t rank,
    const CostModel& flops,
    double seconds) {
  FRAMESHARD_CHECK(
      rank >= 0 && rank < static_cast<int64_t>(plan.ranks.size()),
      "rank_workload",
      "expected rank in [0, ",
      plan.ranks.size(),
      "), got ",
      rank);
  const RankShard& rs = plan.ranks[static_cast<size_t>(rank)];
  return call_workload(
      rs.cu_seqlens, rs.grid, rs.pieces, flops, plan.split, seconds);
}

std::array<double, kWorkloadSampleDoubles> to_doubles(const WorkloadSample& s) {
  return {
      s.sum_p2,
      s.sum_p,
      s.frames,
      s.calls,
      s.split_calls,
      s.exchange_rows,
      s.flop_cost,
      s.seconds};
}

WorkloadSample from_doubles(const double* d) {
  WorkloadSample s;
  s.sum_p2 = d[0];
  s.sum_p = d[1];
  s.frames = d[2];
  s.calls = d[3];
  s.split_calls = d[4];
  s.exchange_rows = d[5];
  s.flop_cost = d[6];
  s.seconds = d[7];
  return s;
}

PlanOptions plan_options_with(const WorkloadFit& fit, PlanOptions options) {
  // The per-row exchange cost is in the units of the model it came with
  // (config.cpp moves it into them): a FLOP-unit row cost under a fit in
  // seconds would make every cut look ~1e9 times too dear.
  const double from = options.cost.seconds_per_unit;
  const double to = fit.model.seconds_per_unit;
  if (fit.fitted) {
    options.split.exchange_row_cost = fit.exchange_row;  // measured
  } else if (from > 0.0 && to > 0.0) {
    options.split.exchange_row_cost *= from / to;
  }
  options.cost = fit.model;
  options.split.exchange_fixed_cost = fit.exchange_fixed;
  return options;
}

double predicted_slowest(
    const ShardPlan& plan, const WorkloadFit& judge, const CostModel& flops) {
  double slowest = 0.0;
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    slowest = std::max(
        slowest,
        judge.predict(
            rank_workload(plan, static_cast<int64_t>(r), flops, 0.0)));
  }
  return slowest;
}

double WorkloadFit::predict(const WorkloadSample& s) const {
  if (!fitted) {
    return (s.flop_cost + exchange_fixed * s.split_calls) *
           flop_seconds_per_unit;
  }
  return model.a * s.sum_p2 + model.b * s.sum_p + model.c * s.frames +
         per_call * s.calls + exchange_fixed * s.split_calls +
         exchange_row * s.exchange_rows;
}

std::string WorkloadFit::describe() const {
  if (!fitted) {
    return model.label;
  }
  return "online: a=" + number(model.a) + " b=" + number(model.b) +
         " c=" + number(model.c) + " per_call=" + number(per_call) +
         " split=" + number(exchange_fixed) +
         " kv_row=" + number(exchange_row) + " s (rms " +
         percent(rms_relative_error) + ", FLOPs " +
         percent(flop_rms_relative_error) + ", " + std::to_string(used) +
         " samples, " + std::to_string(rejected) + " rejected" +
         (split_measured ? "" : "; no split call measured") + ")";
}

WorkloadFit flop_fit(
    const CostModel& flops, double exchange_fixed, double exchange_row) {
  WorkloadFit fit;
  fit.model = flops;
  fit.exchange_fixed = exchange_fixed;
  fit.exchange_row = exchange_row;
  fit.flop_seconds_per_unit = flops.seconds_per_unit;
  return fit;
}

WorkloadFit flop_fit(const PlanOptions& flop_plan) {
  return flop_fit(
      flop_plan.cost,
      flop_plan.split.exchange_fixed_cost,
      flop_plan.split.exchange_row_cost);
}

WorkloadFit fit_workloads(
    const std::vector<WorkloadSample>& samples,
    const OnlineCostOptions& options) {
  check_samples("fit_workloads", samples);
  WorkloadFit fit = fit_once(samples);
  // Outliers: residuals far from the median residual, in robust units.
  std::vector<double> residuals;
  residuals.reserve(samples.size());
  for (const WorkloadSample& s : samples) {
    residuals.push_back(fit.predict(s) / s.seconds - 1.0);
  }
  const double mid = median(residuals);
  std::vector<double> spread;
  spread.reserve(residuals.size());
  for (const double r : residuals) {
    spread.push_back(std::fabs(r - mid));
  }
  const double limit = std::max(
      options.min_outlier, options.outlier_mads * 1.4826 * median(spread));
  std::vector<WorkloadSample> kept;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (spread[i] <= limit) {
      kept.push_back(samples[i]);
    }
  }
  if (!kept.empty() && kept.size() < samples.size()) {
    fit = fit_once(kept);
  }
  fit.rejected = static_cast<int64_t>(samples.size() - kept.size());
  const std::vector<WorkloadSample>& judged = kept.empty() ? samples : kept;
  fit.split_measured =
      std::any_of(judged.begin(), judged.end(), [](const WorkloadSample& s) {
        return s.split_calls > 0.0;
      });
  const WorkloadFit flops = scaled_flops(judged);
  fit.flop_seconds_per_unit = flops.flop_seconds_per_unit;
  fit.flop_rms_relative_error = rms_error(judged, flops);
  fit.model.seconds_per_unit = 1.0;
  fit.model.label = fit.describe();
  return fit;
}

OnlineCost::OnlineCost(WorkloadFit start, OnlineCostOptions options)
    : options_(options),
      start_(std::move(start)),
      in_force_(start_),
      candidate_(in_force_) {
  FRAMESHARD_CHECK(
      options_.window >= 1,
      "OnlineCost",
      "expected options.window >= 1, got ",
      options_.window);
  FRAMESHARD_CHECK(
      options_.noise_margin >= 0.0,
      "OnlineCost",
      "expected options.noise_margin >= 0, got ",
      options_.noise_margin);
  FRAMESHARD_CHECK(
      options_.switch_margin >= 0.0 && options_.switch_margin < 1.0,
      "OnlineCost",
      "expected options.switch_margin in [0, 1), got ",
      options_.switch_margin);
}

void OnlineCost::record(const std::vector<WorkloadSample>& call) {
  check_samples("OnlineCost::record", call);
  for (const WorkloadSample& s : call) {
    window_.push_back(s);
  }
  while (static_cast<int64_t>(window_.size()) > options_.window) {
    window_.pop_front();
  }
  ++calls_;
}

bool OnlineCost::record_gathered(const std::vector<double>& gathered) {
  FRAMESHARD_CHECK(
      gathered.size() % kWorkloadSampleDoubles == 0,
      "OnlineCost::record_gathered",
      "expected a multiple of ",
      kWorkloadSampleDoubles,
      " doubles, got ",
      gathered.size());
  std::vector<WorkloadSample> call;
  for (std::size_t i = 0; i < gathered.size(); i += kWorkloadSampleDoubles) {
    const WorkloadSample s = from_doubles(gathered.data() + i);
    if (s.seconds > 0.0) {
      call.push_back(s);
    }
  }
  if (call.empty()) {
    return false;
  }
  record(call);
  return true;
}

bool OnlineCost::update(const Slowest& slowest) {
  if (calls_ < options_.warmup_calls || window_.empty()) {
    why_ = "warming up (" + std::to_string(calls_) + " of " +
           std::to_string(options_.warmup_calls) + " calls)";
    return false;
  }
  const std::vector<WorkloadSample> window(window_.begin(), window_.end());
  candidate_ = fit_workloads(window, options_);
  if (!candidate_.split_measured) {
    // The configured split costs, in seconds: the latency at the FLOP
    // model's own rate (it was configured in seconds), the per-row cost
    // (FLOP units of work) at the rate this window measured.
    candidate_.exchange_fixed =
        start_.exchange_fixed * start_.flop_seconds_per_unit;
    candidate_.exchange_row =
        start_.exchange_row * candidate_.flop_seconds_per_unit;
    candidate_.model.label = candidate_.describe();
  }
  const double fit_error = candidate_.rms_relative_error;
  if (fit_error >= candidate_.flop_rms_relative_error) {
    why_ = "kept " + std::string(in_force_.fitted ? "the fit" : "FLOPs") +
           ": the fit explains the times worse than FLOPs (rms " +
           percent(fit_error) +
           " >= " + percent(candidate_.flop_rms_relative_error) + ")";
    return false;
  }
  bool take = !in_force_.fitted;
  std::string reason = "it explains the times better than FLOPs";
  if (!take) {
    const double stale = rms_error(window, in_force_);
    if (stale > options_.refit_error && fit_error < stale) {
      take = true;
      reason = "the fit in force mispredicts the window (rms " +
               percent(stale) + ")";
    } else if (
        !in_force_.split_measured && candidate_.split_measured &&
        fit_error < stale) {
      take = true;
      reason = "it measured the split calls the fit in force had not seen";
    }
  }
  if (!take) {
    const double now = slowest(in_force_, candidate_);
    const double next = slowest(candidate_, candidate_);
    const double gain = now > 0.0 ? 1.0 - next / now : 0.0;
    // A gain within the times' own noise (the fit's error) is no gain.
    const double needed =
        std::max(options_.switch_margin, options_.noise_margin * fit_error);
    take = gain > needed;
    reason = "its plan's slowest rank gains " + percent(gain) +
             (take ? " > " : " <= ") + percent(needed);
  }
  why_ = (take ? "switched: " : "kept the fit in force: ") + reason;
  if (take) {
    in_force_ = candidate_;
    ++switches_;
  }
  return take;
}

}  // namespace frameshard
