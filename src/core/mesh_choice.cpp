// The per-step choice of a mesh plan (frameshard/mesh_plan.h): both plans
// predicted on one model -- the slowest rank's tower plus the slowest rank's
// received bytes -- and the mesh kept only when it gains min_gain.
#include "core/mesh_choice.h"
#include "core/units_text.h"

#include <frameshard/error.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace frameshard {

namespace {

std::string fixed2(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// Pixel rows each rank receives from ranks of other replicas (a unit's rows
// leave from the replica of its first use; within a replica they are local).
std::vector<int64_t> pixel_rows_in(const MeshPlan& mp) {
  const int64_t world = mp.dp * mp.cp;
  std::vector<int64_t> in(static_cast<size_t>(world), 0);
  const std::vector<int64_t>& bounds = mp.replica_patch_rows;
  for (int64_t d = 0; d < world; ++d) {
    for (const RowRange& range : mp.plan.ranks[d].pixel_ranges) {
      for (const RowRange& s : source_rows(mp.dedup, mp.plan.frames, range)) {
        int64_t begin = s.begin;
        while (begin < s.end) {
          const int64_t q = mp.replica_of_patch_row(begin);
          const int64_t end = std::min(s.end, bounds[q + 1]);
          if (q != d / mp.cp) {
            in[d] += end - begin;
          }
          begin = end;
        }
      }
    }
  }
  return in;
}

// Output rows each rank receives from other ranks: the distinct rows its
// replica's tokens use, less those it encoded itself (every cp rank of a
// replica consumes all of the replica's rows).
std::vector<int64_t> output_rows_in(const MeshPlan& mp) {
  const int64_t world = mp.dp * mp.cp;
  const ShardPlan& plan = mp.plan;
  std::vector<int64_t> encoder(static_cast<size_t>(plan.frames.total_tokens));
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t t : encoded_tokens(plan, r)) {
      encoder[static_cast<size_t>(t)] = r;
    }
  }
  std::vector<int64_t> seen(encoder.size(), -1);
  std::vector<int64_t> needed(static_cast<size_t>(mp.dp), 0);
  std::vector<int64_t> own(static_cast<size_t>(world), 0);
  for (int64_t q = 0; q < mp.dp; ++q) {
    for (int64_t t = mp.replica_tokens[q]; t < mp.replica_tokens[q + 1]; ++t) {
      const auto s = static_cast<size_t>(mp.dedup.source_token(t));
      if (seen[s] == q) {
        continue;  // a repeat inside the replica travels once
      }
      seen[s] = q;
      needed[q] += 1;
      if (encoder[s] / mp.cp == q) {
        own[encoder[s]] += 1;
      }
    }
  }
  std::vector<int64_t> in(static_cast<size_t>(world));
  for (int64_t d = 0; d < world; ++d) {
    in[d] = needed[d / mp.cp] - own[d];
  }
  return in;
}

// The unit offsets of each replica's block in the planned grid: its units,
// or with dedup the distinct units first used in it.
std::vector<int64_t> replica_blocks(const MeshPlan& mp) {
  if (mp.dedup.identity()) {
    return mp.replica_units;
  }
  std::vector<int64_t> blocks(static_cast<size_t>(mp.dp + 1), 0);
  for (int64_t u : mp.dedup.first_use) {
    blocks[mp.replica_of_unit(u) + 1] += 1;
  }
  for (int64_t q = 0; q < mp.dp; ++q) {
    blocks[q + 1] += blocks[q];
  }
  return blocks;
}

}  // namespace

std::string to_string(MeshMode mode) {
  return mode == MeshMode::kMesh ? "mesh" : "cp-only";
}

MeshEstimate estimate_mesh_plan(
    const MeshPlan& plan, const MeshPlanOptions& options) {
  if (!plan.plan.sharded()) {
    return {};
  }
  const double spu = plan.plan.options.cost.seconds_per_unit;
  const double bytes_per_second =
      options.plan.policy.gather_bandwidth_gbps * 1e9;
  const std::vector<int64_t> pixels = pixel_rows_in(plan);
  const std::vector<int64_t> outputs = output_rows_in(plan);
  const auto other = [&](int64_t q) {
    return options.replica_other_seconds.empty()
               ? 0.0
               : options.replica_other_seconds[static_cast<size_t>(q)];
  };
  // Per replica: its slowest rank's tower, bytes and rows.
  std::vector<MeshEstimate> replica(static_cast<size_t>(plan.dp));
  for (int64_t d = 0; d < plan.dp * plan.cp; ++d) {
    MeshEstimate& e = replica[static_cast<size_t>(d / plan.cp)];
    e.compute_seconds =
        std::max(e.compute_seconds, plan.plan.ranks[d].cost * spu);
    e.rows_in = std::max(e.rows_in, pixels[d] + outputs[d]);
    e.route_bytes = std::max(
        e.route_bytes,
        pixels[d] * options.pixel_row_bytes +
            outputs[d] * options.plan.policy.gather_row_bytes);
  }
  const bool cp_only = plan.mode == MeshMode::kCpOnly;
  const int64_t exchanges = cp_only ? (plan.cp > 1 ? 1 : 0) : 2;
  const double latency =
      static_cast<double>(exchanges) * options.exchange_latency_seconds;
  MeshEstimate total;
  for (int64_t q = 0; q < plan.dp; ++q) {
    MeshEstimate& e = replica[static_cast<size_t>(q)];
    e.route_seconds =
        static_cast<double>(e.route_bytes) / bytes_per_second + latency;
    e.other_seconds = other(q);
    if (cp_only) {
      // Each replica on its own: the step is its critical replica's.
      const int64_t rows_in = std::max(total.rows_in, e.rows_in);
      if (q == 0 || e.total() > total.total()) {
        total = e;
      }
      total.rows_in = rows_in;
      continue;
    }
    // Pooled: every term is the slowest of the whole mesh.
    total.compute_seconds = std::max(total.compute_seconds, e.compute_seconds);
    total.route_seconds = std::max(total.route_seconds, e.route_seconds);
    total.route_bytes = std::max(total.route_bytes, e.route_bytes);
    total.rows_in = std::max(total.rows_in, e.rows_in);
    total.other_seconds = std::max(total.other_seconds, e.other_seconds);
  }
  return total;
}

namespace internal {

void check_mesh_choice_options(const MeshPlanOptions& o) {
  FRAMESHARD_CHECK(
      std::isfinite(o.min_gain) && o.min_gain >= 0.0 && o.min_gain < 1.0,
      "make_mesh_plan",
      "expected options.min_gain (mesh_min_gain) in [0, 1), got ",
      o.min_gain);
  FRAMESHARD_CHECK(
      o.pixel_row_bytes >= 0,
      "make_mesh_plan",
      "expected options.pixel_row_bytes >= 0, got ",
      o.pixel_row_bytes);
  FRAMESHARD_CHECK(
      o.replica_other_seconds.empty() ||
          static_cast<int64_t>(o.replica_other_seconds.size()) == o.dp,
      "make_mesh_plan",
      "expected options.replica_other_seconds empty or one per replica (",
      o.dp,
      "), got ",
      o.replica_other_seconds.size());
  FRAMESHARD_CHECK(
      std::isfinite(o.exchange_latency_seconds) &&
          o.exchange_latency_seconds >= 0.0,
      "make_mesh_plan",
      "expected options.exchange_latency_seconds finite and >= 0, got ",
      o.exchange_latency_seconds);
  for (double s : o.replica_other_seconds) {
    FRAMESHARD_CHECK(
        std::isfinite(s) && s >= 0.0,
        "make_mesh_plan",
        "expected options.replica_other_seconds finite and >= 0, got ",
        s);
  }
}

void choose_mesh_mode(
    MeshPlan& mp,
    const MeshPlanOptions& options,
    const std::vector<GridThw>& planned) {
  if (options.plan.policy.kind != PolicyKind::kAuto || !mp.plan.sharded() ||
      mp.dp < 2) {
    return;
  }
  MeshChoice& c = mp.choice;
  c.weighed = true;
  c.mesh = estimate_mesh_plan(mp, options);
  PlanOptions po = options.plan;
  po.world = mp.dp * mp.cp;
  ShardPlan other = make_blocked_plan(planned, po, replica_blocks(mp), "");
  std::swap(mp.plan, other);  // mp.plan: the CP-only plan
  mp.mode = MeshMode::kCpOnly;
  c.cp_only = estimate_mesh_plan(mp, options);
  mp.mode = MeshMode::kMesh;
  const double mesh = c.mesh.total();
  const double cp_only = c.cp_only.total();
  const std::string gain = fixed2(c.gain());
  const std::string bound = "mesh_min_gain " + fixed2(options.min_gain);
  const auto ms = internal::milliseconds_text;
  if (mesh <= cp_only * (1.0 - options.min_gain) && mesh < cp_only) {
    std::swap(mp.plan, other);
    c.reason = "mesh: " + ms(mesh) + " against cp-only " + ms(cp_only) +
               " (gain " + gain + " >= " + bound + ")";
    return;
  }
  mp.mode = MeshMode::kCpOnly;
  c.reason = "cp-only: " + ms(cp_only) + " against mesh " + ms(mesh) +
             " (gain " + gain + " < " + bound + ")";
  mp.plan.reason = c.reason;
  mp.plan.fingerprint = recompute_fingerprint(mp.plan);
}

}  // namespace internal
}  // namespace frameshard
