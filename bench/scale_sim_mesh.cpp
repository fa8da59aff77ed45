// The mesh mode of the scale simulation (scale_sim_mesh.h).
#include "scale_sim_mesh.h"

#include <frameshard/config.h>
#include <frameshard/media_manifest.h>
#include <frameshard/mesh_plan.h>
#include <frameshard/models/cost_bridge.h>
#include <frameshard/workload.h>

#include "tower_timing.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

namespace frameshard {
namespace bench {
namespace {

// Replica q of step s packs samples_per_replica consecutive samples from
// (s * dp + q) * samples_per_replica, cycling (as the training job's
// manifest batches do), scaled down.
std::vector<std::vector<GridThw>> step_replicas(
    const std::vector<MediaSample>& samples,
    const MeshSimArgs& a,
    const MediaLayout& layout,
    int64_t step) {
  const auto n = static_cast<int64_t>(samples.size());
  std::vector<std::vector<GridThw>> out;
  for (int64_t q = 0; q < a.dp; ++q) {
    Workload wl;
    wl.layout = layout;
    for (int64_t k = 0; k < a.samples_per_replica; ++k) {
      const int64_t i = ((step * a.dp + q) * a.samples_per_replica + k) % n;
      const auto& g = samples[static_cast<size_t>(i)].grid;
      wl.grid.insert(wl.grid.end(), g.begin(), g.end());
    }
    out.push_back(scale_workload(wl, a.scale).grid);
  }
  return out;
}

struct Bottleneck {
  std::string plan = "mesh";  // the mesh arm: MeshMode it ran
  double predicted = 0.0;     // the choice's mesh / cp-only (0: not weighed)
  double seconds = 0.0;       // slowest rank: tower + its modelled transfer
  double compute = 0.0;       // slowest rank's tower time alone
  double sum = 0.0;           // tower time summed over every rank
  double cost = 0.0;          // the cost model's slowest rank

  // One rank that took `tower` seconds and receives `bytes_in` over a link
  // of `gbps`.
  void add_rank(double tower, int64_t bytes_in, double gbps) {
    seconds =
        std::max(seconds, tower + static_cast<double>(bytes_in) / (gbps * 1e9));
    compute = std::max(compute, tower);
    sum += tower;
  }
  void add_costs(const std::vector<double>& rank_costs) {
    for (double c : rank_costs) {
      cost = std::max(cost, c);
    }
  }
};

int64_t row_bytes(const models::QwenVisionModel& m) {
  return 4 * m.config.out_hidden_size() *
         static_cast<int64_t>(m.config.output_names().size());
}

// mesh_dims [cp]: each replica's frames over its own cp ranks.
Bottleneck cp_only(
    const models::QwenVisionModel& m,
    const std::vector<std::vector<GridThw>>& replicas,
    const PlanOptions& o,
    const MeshSimArgs& a) {
  Bottleneck b;
  for (const auto& grid : replicas) {
    if (grid.empty()) {
      continue;  // a text-only replica: no vision
    }
    const ShardPlan plan = make_plan(grid, o);
    const auto t = cli::time_rank_shares(
        m, plan, cli::random_pixels(m, grid), {a.repeats, false, a.cpu_clock});
    for (size_t r = 0; r < t.size(); ++r) {
      const int64_t in =
          plan.sharded() ? plan.frames.total_tokens - plan.gather_counts[r] : 0;
      b.add_rank(t[r], in * row_bytes(m), a.bandwidth_gbps);
    }
    b.add_costs(plan.partition.rank_costs);
  }
  return b;
}

// mesh_dims [dp, cp]: every replica's frames over all dp * cp ranks.
Bottleneck mesh(
    const models::QwenVisionModel& m,
    const std::vector<std::vector<GridThw>>& replicas,
    const PlanOptions& o,
    const MeshSimArgs& a) {
  MeshPlanOptions mo;
  mo.dp = a.dp;
  mo.cp = a.cp;
  mo.plan = o;
  mo.min_gain = a.min_gain;
  mo.pixel_row_bytes = 4 * m.config.in_features();
  if (a.choose) {
    mo.plan.policy.kind = PolicyKind::kAuto;
  }
  const MeshPlan mp = make_mesh_plan(replicas, mo);
  Bottleneck b;
  if (mp.empty()) {
    return b;
  }
  b.plan = to_string(mp.mode);
  if (mp.choice.weighed && mp.choice.cp_only.total() > 0) {
    b.predicted = mp.choice.mesh.total() / mp.choice.cp_only.total();
  }
  std::vector<GridThw> pooled;
  for (const auto& g : replicas) {
    pooled.insert(pooled.end(), g.begin(), g.end());
  }
  const auto t = cli::time_rank_shares(
      m,
      mp.plan,
      cli::random_pixels(m, pooled),
      {a.repeats, false, a.cpu_clock});
  const int64_t pixel_row = 4 * m.config.in_features();
  for (int64_t r = 0; r < a.dp * a.cp; ++r) {
    int64_t in = 0;
    if (mp.plan.sharded()) {
      const MeshPixelRoute px = mesh_pixel_route(mp, r);
      const OwnerRoute out = mesh_output_route(mp, r);
      const auto sum = [](const std::vector<int64_t>& v) {
        return std::accumulate(v.begin(), v.end(), int64_t{0});
      };
      in = (sum(px.recv_counts) - px.recv_counts[r]) * pixel_row +
           (static_cast<int64_t>(out.tokens.size()) - out.recv_counts[r]) *
               row_bytes(m);
    }
    b.add_rank(t[static_cast<size_t>(r)], in, a.bandwidth_gbps);
  }
  b.add_costs(mp.plan.partition.rank_costs);
  return b;
}

void simulate_manifest(
    const MeshSimArgs& a,
    const std::string& path,
    const models::QwenVisionModel& m) {
  const MediaLayout layout = models::media_layout(m.config);
  const auto samples = load_media_manifest(path, processor_rule(a.family));
  PlanOptions o;
  o.world = a.cp;
  o.layout = layout;
  o.cost = flop_cost_model(models::tower_dims(m.config));
  if (!a.cost_alpha.empty()) {
    Config cfg;
    cfg.frame_sharding.cost_alpha = a.cost_alpha;
    // The cost and, in its units, the split exchange's price.
    const PlanOptions c = plan_options(cfg, models::tower_dims(m.config));
    o.cost = c.cost;
    o.split.exchange_row_cost = c.split.exchange_row_cost;
    o.split.exchange_fixed_cost = c.split.exchange_fixed_cost;
    o.split.window_side = c.split.window_side;
  }
  o.policy.enabled = true;
  o.policy.min_tokens = 0;
  o.policy.min_frames = 0;
  o.policy.gather_bandwidth_gbps = a.bandwidth_gbps;
  o.policy.gather_row_bytes = row_bytes(m);
  o.split.enabled = a.split;
  std::printf(
      "\n%s: %zu samples, dp %lld x cp %lld, %lld samples per replica, h "
      "and w / %lld\n%5s %18s %9s %9s %7s %9s %7s %7s %8s %9s\n",
      path.c_str(),
      samples.size(),
      static_cast<long long>(a.dp),
      static_cast<long long>(a.cp),
      static_cast<long long>(a.samples_per_replica),
      static_cast<long long>(a.scale),
      "step",
      "replica rows",
      "[cp] s",
      "mesh s",
      "ratio",
      "ideal s",
      "compute",
      "cost",
      "plan",
      "predicted");
  double cp_total = 0.0, mesh_total = 0.0;
  int64_t on_mesh = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    const auto replicas = step_replicas(samples, a, layout, s);
    int64_t lo = -1, hi = 0;
    for (const auto& g : replicas) {
      int64_t rows = 0;
      for (const auto& x : g) {
        rows += x.patches();
      }
      lo = lo < 0 ? rows : std::min(lo, rows);
      hi = std::max(hi, rows);
    }
    const Bottleneck c = cp_only(m, replicas, o, a);
    const Bottleneck x = mesh(m, replicas, o, a);
    cp_total += c.seconds;
    mesh_total += x.seconds;
    on_mesh += x.plan == "mesh" ? 1 : 0;
    char rows[32];
    std::snprintf(
        rows, sizeof(rows), "%lld-%lld", (long long)lo, (long long)hi);
    std::printf(
        "%5lld %18s %9.3f %9.3f %7.3f %9.3f %7.3f %7.3f %8s %9.3f\n",
        static_cast<long long>(s),
        rows,
        c.seconds,
        x.seconds,
        c.seconds > 0 ? x.seconds / c.seconds : 0.0,
        c.sum / static_cast<double>(a.dp * a.cp),
        c.compute > 0 ? x.compute / c.compute : 0.0,
        c.cost > 0 ? x.cost / c.cost : 0.0,
        x.plan.c_str(),
        x.predicted);
    std::fflush(stdout);
  }
  std::printf(
      "  all steps: [cp] %.3f s, mesh %.3f s, mesh / [cp] %.3f; %lld of "
      "%lld steps on the mesh\n",
      cp_total,
      mesh_total,
      cp_total > 0 ? mesh_total / cp_total : 0.0,
      static_cast<long long>(on_mesh),
      static_cast<long long>(a.steps));
}

}  // namespace

void simulate_mesh(const MeshSimArgs& a, const models::QwenVisionModel& m) {
  std::printf(
      "mesh simulation: per step, the slowest rank's tower forward + "
      "backward (CPU time, one thread, every rank's share in turn) plus its "
      "transfers at %.0f GB/s, under mesh_dims [cp] and [dp, cp]; ratio = "
      "mesh / [cp]; ideal = all tower time / (dp * cp); compute and cost: "
      "the ratio of the slowest tower time alone and of the cost model's "
      "slowest rank; plan: what the mesh arm ran (policy %s%s), predicted: "
      "the choice's mesh / cp-only\n",
      a.bandwidth_gbps,
      a.choose ? "auto" : "threshold: always the mesh",
      a.split ? ", split frames" : "");
  for (const auto& p : a.manifests) {
    simulate_manifest(a, p, m);
  }
}

}  // namespace bench
}  // namespace frameshard
