// The mesh report of `frameshard plan --dp` (plan_mesh.h).
#include "plan_mesh.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace frameshard {
namespace cli {
namespace {

// The replicas whose frames rank `r` encodes (ascending; a split piece
// counts for its frame's replica).
std::vector<int64_t> source_replicas(const MeshPlan& mp, int64_t r) {
  std::set<int64_t> q;
  for (int64_t u : mp.plan.ranks[r].units) {
    const int64_t use =
        mp.dedup.identity() ? u : mp.dedup.first_use[static_cast<size_t>(u)];
    q.insert(mp.replica_of_unit(use));
  }
  return {q.begin(), q.end()};
}

std::string replicas_text(const std::vector<int64_t>& q) {
  std::string t;
  for (int64_t x : q) {
    if (!t.empty()) {
      t += ',';
    }
    t += std::to_string(x);
  }
  return t.empty() ? "-" : t;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", seconds * 1e3);
  return buf;
}

}  // namespace

MeshPlanOptions mesh_plan_options(
    const Config& config, int64_t dp, const MediaLayout& layout) {
  MeshPlanOptions o;
  o.dp = dp;
  o.cp = config.cp_size;
  o.plan = plan_options(config);
  o.plan.layout = layout;
  o.min_gain = config.frame_sharding.mesh_min_gain;
  o.exchange_latency_seconds =
      config.frame_sharding.split_exchange_latency_us * 1e-6;
  return o;
}

void print_mesh_plan(
    std::ostream& os,
    const MeshPlan& mp,
    const std::vector<std::string>& origins) {
  os << "mesh: dp " << mp.dp << " x cp " << mp.cp << " = " << mp.dp * mp.cp
     << " ranks (frame_sharding.mesh_dims [dp, cp])\n";
  for (int64_t q = 0; q < mp.dp; ++q) {
    os << "  replica " << q << ": "
       << mp.replica_units[q + 1] - mp.replica_units[q] << " frame units, "
       << mp.replica_patch_rows[q + 1] - mp.replica_patch_rows[q]
       << " patch rows (" << origins[static_cast<size_t>(q)] << ")\n";
  }
  os << "path: " << to_string(mp.plan.path) << " (" << mp.plan.reason << ")"
     << (mp.plan.split ? ", split frames" : "") << "\n";
  if (!mp.plan.sharded()) {
    os << "each replica encodes its own frames\n";
    return;
  }
  os << "step runs: " << to_string(mp.mode);
  if (mp.choice.weighed) {
    os << " -- " << mp.choice.reason << "\n  predicted: mesh "
       << ms(mp.choice.mesh.compute_seconds) << " tower + "
       << ms(mp.choice.mesh.route_seconds) << " traffic; cp-only "
       << ms(mp.choice.cp_only.compute_seconds) << " tower + "
       << ms(mp.choice.cp_only.route_seconds) << " traffic\n";
  } else {
    os << " (policy threshold pools every sharded step; policy auto "
          "weighs the CP-only plan)\n";
  }
  char buf[160];
  std::snprintf(
      buf,
      sizeof(buf),
      "  %4s %7s %6s %10s %7s %12s  %s\n",
      "rank",
      "replica",
      "units",
      "patch_rows",
      "tokens",
      "cost",
      "frames of replicas");
  os << buf;
  for (int64_t r = 0; r < mp.dp * mp.cp; ++r) {
    const RankShard& rs = mp.plan.ranks[r];
    std::snprintf(
        buf,
        sizeof(buf),
        "  %4lld %7lld %6zu %10lld %7lld %12.4g  %s\n",
        static_cast<long long>(r),
        static_cast<long long>(mp.replica_of_rank(r)),
        rs.units.size(),
        static_cast<long long>(rs.real_patch_rows),
        static_cast<long long>(rs.real_tokens),
        rs.cost,
        replicas_text(source_replicas(mp, r)).c_str());
    os << buf;
  }
}

nlohmann::json mesh_plan_json(
    const MeshPlan& mp, const std::vector<std::string>& origins) {
  nlohmann::json j;
  j["dp"] = mp.dp;
  j["cp"] = mp.cp;
  j["path"] = to_string(mp.plan.path);
  j["reason"] = mp.plan.reason;
  j["split"] = mp.plan.split;
  j["mode"] = to_string(mp.mode);
  j["weighed"] = mp.choice.weighed;
  j["gain"] = mp.choice.gain();
  j["choice"] = mp.choice.reason;
  j["mesh_seconds"] = mp.choice.mesh.total();
  j["cp_only_seconds"] = mp.choice.cp_only.total();
  j["route_bytes"] = {
      {"mesh", mp.choice.mesh.route_bytes},
      {"cp_only", mp.choice.cp_only.route_bytes}};
  j["replica_units"] = mp.replica_units;
  j["replica_tokens"] = mp.replica_tokens;
  j["origins"] = origins;
  j["ranks"] = nlohmann::json::array();
  if (mp.plan.sharded()) {
    for (int64_t r = 0; r < mp.dp * mp.cp; ++r) {
      const RankShard& rs = mp.plan.ranks[r];
      j["ranks"].push_back(
          {{"rank", r},
           {"replica", mp.replica_of_rank(r)},
           {"units", rs.units},
           {"patch_rows", rs.real_patch_rows},
           {"tokens", rs.real_tokens},
           {"cost", rs.cost},
           {"from_replicas", source_replicas(mp, r)}});
    }
  }
  return j;
}

}  // namespace cli
}  // namespace frameshard
