// `frameshard verify`'s tolerances and report (see the header).

#include "verify_report.h"

#include "pieces_report.h"

#include <frameshard/frames.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/gather.h>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

using parity::ParityProblem;
using parity::ParityReport;
using parity::TensorDiff;

// float64 / float32: an absolute bound on the max abs difference.
// bfloat16: per tensor, TensorDiff::bf16_bound on ||sharded - replicated||.
struct Tolerance {
  bool bf16_rule = false;
  double abs = 0.0;
};

Tolerance tolerance_for(at::ScalarType dtype) {
  Tolerance t;
  if (dtype == at::kDouble) {
    t.abs = 1e-12;
  } else if (dtype == at::kFloat) {
    t.abs = 1e-5;
  } else {
    t.bf16_rule = true;
  }
  return t;
}

// On max_abs_diff (float64 / float32) or norm_diff (bfloat16).
double bound_of(const TensorDiff& d, const Tolerance& tol) {
  return tol.bf16_rule ? d.bf16_bound() : tol.abs;
}

bool within(const TensorDiff& d, const Tolerance& tol) {
  const double v = tol.bf16_rule ? d.norm_diff : d.max_abs_diff;
  return std::isfinite(d.max_abs_diff) && std::isfinite(v) &&
         v <= bound_of(d, tol);
}

std::string tolerance_text(const Tolerance& tol) {
  if (!tol.bf16_rule) {
    return "max abs diff <= " + c10::str(tol.abs);
  }
  return "per tensor, ||sharded - replicated|| <= " +
         c10::str(parity::kBf16ErrorFactor) +
         " x ||replicated - float64 exact|| + " + c10::str(parity::kBf16Slack) +
         " x ||exact|| (Frobenius; bf16 reductions are themselves inexact)";
}

// Everything the report prints, computed once.
struct Facts {
  Facts(
      const VerifyReportContext& c,
      const ParityProblem& p,
      const ParityReport& r)
      : ctx(c), problem(p), report(r), tol(tolerance_for(p.spec.dtype)) {}

  const VerifyReportContext& ctx;
  const ParityProblem& problem;
  const ParityReport& report;
  Tolerance tol;
  bool pass = true;
  std::vector<int64_t> bytes_sent, padded_bytes;
  std::vector<double> encode_ms, backward_ms;
};

Facts gather_facts(
    const VerifyReportContext& ctx,
    const ParityProblem& problem,
    const ParityReport& report) {
  Facts f(ctx, problem, report);
  for (const auto& d : report.gradients) {
    f.pass = f.pass && within(d, f.tol);
  }
  for (const auto& d : report.outputs) {
    f.pass = f.pass && within(d, f.tol);
  }
  int64_t row_bytes = 0;
  for (int64_t w : problem.widths) {
    row_bytes += w * int64_t(c10::elementSize(problem.spec.dtype));
  }
  const ShardPlan& plan = report.plan;
  for (size_t r = 0; r < report.ranks.size(); ++r) {
    f.bytes_sent.push_back(report.ranks[r].bytes_sent);
    f.padded_bytes.push_back(
        plan.sharded()
            ? gather_traffic(plan.gather_counts, int64_t(r), row_bytes)
                  .padded_bytes
            : 0);
    f.encode_ms.push_back(report.ranks[r].encode_ms);
    f.backward_ms.push_back(report.ranks[r].backward_ms);
  }
  return f;
}

// ------------------------------------------------------------- JSON

nlohmann::json plan_json(const ShardPlan& plan) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : plan.ranks) {
    ranks.push_back({
        {"rank", r.rank},
        {"units", r.units.size()},
        {"patch_rows", r.real_patch_rows},
        {"local_patch_rows", r.local_patch_rows},
        {"tokens", r.real_tokens},
        {"local_tokens", r.local_tokens},
        {"pad_frames", r.pad_frames},
        {"dummy_frames", r.dummy_frames},
        {"cost", r.cost},
        {"pieces", pieces_json(plan, r)},
        {"exchange_rows", r.exchange_rows},
    });
  }
  return {
      {"path", to_string(plan.path)},
      {"reason", plan.reason},
      {"fingerprint", fingerprint_hex(plan.fingerprint)},
      {"partitioner", to_string(plan.options.partitioner)},
      {"cost_model", plan.options.cost.label},
      {"min_local_patch_rows", plan.options.min_local_patch_rows},
      {"imbalance", plan.partition.imbalance()},
      {"split", plan.split},
      {"units", plan.frames.units.size()},
      {"ranks", ranks},
  };
}

nlohmann::json diff_json(const TensorDiff& d, const Tolerance& tol) {
  nlohmann::json j = {
      {"name", d.name},
      {"max_abs_diff", d.max_abs_diff},
      {"max_abs_ref", d.max_abs_ref},
      {"bound", bound_of(d, tol)},
      {"pass", within(d, tol)}};
  if (tol.bf16_rule) {
    j["norm_diff"] = d.norm_diff;
    j["norm_replicated_error"] = d.norm_ref_error;
    j["norm_exact"] = d.norm_exact;
  }
  return j;
}

nlohmann::json tolerance_json(const Tolerance& tol) {
  if (tol.bf16_rule) {
    return {
        {"kind", "bf16_norm_vs_replicated_error"},
        {"error_factor", parity::kBf16ErrorFactor},
        {"slack", parity::kBf16Slack},
        {"text", tolerance_text(tol)}};
  }
  return {
      {"kind", "absolute"}, {"value", tol.abs}, {"text", tolerance_text(tol)}};
}

nlohmann::json workload_json(const Facts& f) {
  const Workload& wl = f.ctx.workload;
  nlohmann::json grid_rows = nlohmann::json::array();
  for (const auto& g : wl.grid) {
    grid_rows.push_back({g.t, g.h, g.w});
  }
  return {
      {"name", f.ctx.workload_label},
      {"grid_thw", grid_rows},
      {"spatial_merge_size", wl.layout.spatial_merge_size},
      {"temporal_patch_size", wl.layout.temporal_patch_size},
      {"patch_rows", f.problem.frames.total_patch_rows},
      {"tokens", f.problem.tokens()}};
}

void print_json(const Facts& f) {
  const ParityReport& rep = f.report;
  const TensorDiff& worst = rep.worst_gradient();
  nlohmann::json j;
  j["pass"] = f.pass;
  j["nproc"] = f.ctx.nproc;
  j["dtype"] = f.ctx.dtype_name;
  j["seed"] = f.ctx.seed;
  j["tolerance"] = tolerance_json(f.tol);
  j["workload"] = workload_json(f);
  j["plan"] = plan_json(rep.plan);
  nlohmann::json outputs;
  for (const auto& d : rep.outputs) {
    outputs[d.name] = diff_json(d, f.tol);
  }
  j["outputs"] = outputs;
  nlohmann::json grads = nlohmann::json::array();
  for (const auto& d : rep.gradients) {
    grads.push_back(diff_json(d, f.tol));
  }
  j["gradients"] = grads;
  j["max_abs_diff"] = {
      {"embeddings", rep.outputs[0].max_abs_diff},
      {"deepstack",
       rep.outputs.size() > 1 ? nlohmann::json(rep.outputs[1].max_abs_diff)
                              : nlohmann::json(nullptr)},
      {"gradients", worst.max_abs_diff},
      {"worst_gradient", worst.name}};
  j["bytes_sent"] = f.bytes_sent;
  j["padded_allgather_bytes"] = f.padded_bytes;
  j["encode_ms"] = f.encode_ms;
  j["backward_ms"] = f.backward_ms;
  j["reference_ms"] = rep.reference_ms;
  std::cout << j.dump(2) << std::endl;
}

// ------------------------------------------------------------- text
// The sections share one stream: its number format carries from one to the
// next (fixed after the plan line, scientific from the diffs on).

void text_workload(std::ostream& os, const Facts& f) {
  const Workload& wl = f.ctx.workload;
  os << "frameshard verify: " << f.ctx.nproc << " rank processes, dtype "
     << f.ctx.dtype_name << ", seed " << f.ctx.seed << "\n";
  os << "workload: " << f.ctx.workload_label << ": " << wl.grid.size()
     << " media, " << f.problem.frames.units.size() << " frame units, "
     << f.problem.frames.total_patch_rows << " patch rows, "
     << f.problem.tokens() << " tokens\n";
  os << "  grid_thw:";
  for (const auto& g : wl.grid) {
    os << " (" << g.t << "," << g.h << "," << g.w << ")";
  }
  os << "\n";
}

void text_plan(std::ostream& os, const Facts& f) {
  const ShardPlan& plan = f.report.plan;
  // The policy is forced on (zero thresholds): verify always shards when
  // nproc > 1.
  os << "plan: " << to_string(plan.path) << " (" << plan.reason
     << "; policy forced on by verify), partitioner "
     << to_string(plan.options.partitioner) << ", imbalance " << std::fixed
     << std::setprecision(3) << plan.partition.imbalance() << ", fingerprint "
     << fingerprint_hex(plan.fingerprint) << "\n";
  os << "  rank  units  patch_rows  local_rows  tokens  pad_frames  dummy"
     << "  bytes_sent  padded_bytes  encode_ms  backward_ms\n";
  for (const auto& r : plan.ranks) {
    const auto i = static_cast<size_t>(r.rank);
    os << "  " << std::setw(4) << r.rank << "  " << std::setw(5)
       << r.units.size() << "  " << std::setw(10) << r.real_patch_rows << "  "
       << std::setw(10) << r.local_patch_rows << "  " << std::setw(6)
       << r.real_tokens << "  " << std::setw(10) << r.pad_frames << "  "
       << std::setw(5) << r.dummy_frames << "  " << std::setw(10)
       << f.bytes_sent[i] << "  " << std::setw(12) << f.padded_bytes[i] << "  "
       << std::setw(9) << std::setprecision(1) << f.encode_ms[i] << "  "
       << std::setw(11) << f.backward_ms[i] << std::setprecision(3) << "\n";
  }
  for (const auto& r : plan.ranks) {
    if (!r.pieces.empty()) {
      os << "  rank " << r.rank << " pieces" << pieces_text(plan, r).substr(1)
         << "\n";
    }
  }
  os << "reference (replicated, rank 0): " << std::setprecision(1)
     << f.report.reference_ms << " ms forward+backward\n";
}

void text_diff_line(std::ostream& os, const TensorDiff& d, const Facts& f) {
  os << "  " << std::left << std::setw(28) << d.name << std::right
     << " max abs diff " << d.max_abs_diff << "  (max abs ref "
     << d.max_abs_ref;
  if (f.tol.bf16_rule) {
    os << "; norms: diff " << d.norm_diff << ", bf16 error " << d.norm_ref_error
       << ", bound " << bound_of(d, f.tol);
  }
  os << ")" << (within(d, f.tol) ? "" : "  EXCEEDS") << "\n";
}

void text_diffs(std::ostream& os, const Facts& f) {
  const ParityReport& rep = f.report;
  os << std::scientific << std::setprecision(3);
  os << "outputs (sharded vs replicated, every rank):\n";
  for (const auto& d : rep.outputs) {
    text_diff_line(os, d, f);
  }
  os << "parameter gradients (summed over ranks vs replicated):\n";
  for (const auto& d : rep.gradients) {
    text_diff_line(os, d, f);
  }
  const TensorDiff& worst = rep.worst_gradient();
  os << "max abs diff: embeddings " << rep.outputs[0].max_abs_diff;
  if (rep.outputs.size() > 1) {
    os << ", deepstack " << rep.outputs[1].max_abs_diff;
  }
  os << ", gradients " << worst.max_abs_diff << " (" << worst.name << ")\n";
  os << "tolerance (" << f.ctx.dtype_name << "): " << tolerance_text(f.tol)
     << "\n";
  os << (f.pass ? "PASS" : "FAIL") << "\n";
}

}  // namespace

int print_verify_report(
    const VerifyReportContext& context,
    const ParityProblem& problem,
    const ParityReport& report) {
  const Facts f = gather_facts(context, problem, report);
  if (context.json) {
    print_json(f);
  } else {
    std::ostringstream os;
    text_workload(os, f);
    text_plan(os, f);
    text_diffs(os, f);
    std::cout << os.str() << std::flush;
  }
  return f.pass ? 0 : 1;
}

}  // namespace cli
}  // namespace frameshard
