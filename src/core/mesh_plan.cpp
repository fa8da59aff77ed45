// Planning over the dp x cp mesh (frameshard/mesh_plan.h): make_plan over
// the replicas' pooled grid, and the two routes every mesh rank takes part
// in (pixel rows to the ranks that encode them, outputs to the ranks whose
// replica consumes them).
#include <frameshard/error.h>
#include <frameshard/mesh_plan.h>

#include "core/arrival_order.h"
#include "core/mesh_choice.h"

#include <algorithm>
#include <string>

namespace frameshard {

namespace {

constexpr const char* kMeshPlanFn = "make_mesh_plan";

// Index of the segment of `offsets` (non-decreasing, first 0) holding
// `value`: the q with offsets[q] <= value < offsets[q + 1] among non-empty
// segments.
int64_t segment_of(const std::vector<int64_t>& offsets, int64_t value) {
  const auto it = std::upper_bound(offsets.begin(), offsets.end(), value);
  return static_cast<int64_t>(it - offsets.begin()) - 1;
}

// The plan of a mesh without media: nothing to encode, every rank empty.
ShardPlan empty_plan(const PlanOptions& options) {
  ShardPlan plan;
  plan.options = options;
  plan.path = PlanPath::kReplicated;
  plan.reason = "no media on any replica";
  plan.frames.layout = options.layout;
  plan.partition.method = options.partitioner;
  plan.ranks.resize(static_cast<size_t>(options.world));
  for (int64_t r = 0; r < options.world; ++r) {
    plan.ranks[r].rank = r;
    plan.ranks[r].cu_seqlens = {0};
  }
  plan.gather_counts.assign(static_cast<size_t>(options.world), 0);
  plan.fingerprint = recompute_fingerprint(plan);
  return plan;
}

}  // namespace

int64_t MeshPlan::replica_of_token(int64_t token) const {
  return segment_of(replica_tokens, token);
}

int64_t MeshPlan::replica_of_unit(int64_t unit) const {
  return segment_of(replica_units, unit);
}

int64_t MeshPlan::replica_of_patch_row(int64_t row) const {
  return segment_of(replica_patch_rows, row);
}

MeshPlan make_mesh_plan(
    const std::vector<std::vector<GridThw>>& replicas,
    const MeshPlanOptions& options,
    const std::vector<std::vector<UnitKey>>& replica_keys) {
  FRAMESHARD_CHECK(
      options.dp >= 1 && options.dp <= kMaxMeshReplicas,
      kMeshPlanFn,
      "expected dp in [1, ",
      kMaxMeshReplicas,
      "], got ",
      options.dp);
  FRAMESHARD_CHECK(
      options.cp >= 1 && options.cp <= kMaxMeshReplicas,
      kMeshPlanFn,
      "expected cp in [1, ",
      kMaxMeshReplicas,
      "], got ",
      options.cp);
  FRAMESHARD_CHECK(
      static_cast<int64_t>(replicas.size()) == options.dp,
      kMeshPlanFn,
      "expected one grid per replica (dp = ",
      options.dp,
      "), got ",
      replicas.size());
  internal::check_mesh_choice_options(options);
  MeshPlan mp;
  mp.dp = options.dp;
  mp.cp = options.cp;
  mp.replica_media = {0};
  mp.replica_units = {0};
  mp.replica_patch_rows = {0};
  mp.replica_tokens = {0};
  std::vector<GridThw> pooled;
  for (int64_t q = 0; q < options.dp; ++q) {
    const std::vector<GridThw>& grid = replicas[static_cast<size_t>(q)];
    int64_t units = 0;
    int64_t rows = 0;
    int64_t tokens = 0;
    if (!grid.empty()) {
      FrameSet frames;
      try {
        frames = expand_frames(grid, options.plan.layout);
      } catch (const Error& e) {
        detail::fail(kMeshPlanFn, "replica ", q, ": ", e.what());
      }
      units = static_cast<int64_t>(frames.units.size());
      rows = frames.total_patch_rows;
      tokens = frames.total_tokens;
      pooled.insert(pooled.end(), grid.begin(), grid.end());
    }
    mp.replica_media.push_back(static_cast<int64_t>(pooled.size()));
    mp.replica_units.push_back(mp.replica_units.back() + units);
    mp.replica_patch_rows.push_back(mp.replica_patch_rows.back() + rows);
    mp.replica_tokens.push_back(mp.replica_tokens.back() + tokens);
  }
  PlanOptions po = options.plan;
  po.world = options.dp * options.cp;
  if (!replica_keys.empty()) {
    FRAMESHARD_CHECK(
        static_cast<int64_t>(replica_keys.size()) == options.dp,
        kMeshPlanFn,
        "expected keys for each of the ",
        options.dp,
        " replicas, got ",
        replica_keys.size());
    std::vector<UnitKey> keys;
    for (int64_t q = 0; q < options.dp; ++q) {
      const auto& k = replica_keys[static_cast<size_t>(q)];
      FRAMESHARD_CHECK(
          static_cast<int64_t>(k.size()) ==
              mp.replica_units[q + 1] - mp.replica_units[q],
          kMeshPlanFn,
          "expected one key per frame unit of replica ",
          q,
          " (",
          mp.replica_units[q + 1] - mp.replica_units[q],
          "), got ",
          k.size());
      keys.insert(keys.end(), k.begin(), k.end());
    }
    mp.dedup = dedup_frames(pooled, keys, options.plan.layout);
    if (!mp.dedup.identity()) {
      pooled = mp.dedup.grid;
    }
  }
  mp.plan = pooled.empty() ? empty_plan(po) : make_plan(pooled, po);
  internal::choose_mesh_mode(mp, options, pooled);
  return mp;
}

MeshPixelRoute mesh_pixel_route(const MeshPlan& plan, int64_t rank) {
  const int64_t world = plan.dp * plan.cp;
  FRAMESHARD_CHECK(
      rank >= 0 && rank < world,
      "mesh_pixel_route",
      "expected a mesh rank in [0, ",
      world,
      "), got ",
      rank);
  MeshPixelRoute r;
  r.send_counts.assign(static_cast<size_t>(world), 0);
  r.recv_counts.assign(static_cast<size_t>(world), 0);
  if (!plan.plan.sharded()) {
    return r;
  }
  const std::vector<int64_t>& bounds = plan.replica_patch_rows;
  for (int64_t d = 0; d < world; ++d) {
    std::vector<RowRange> ranges;
    for (const RowRange& range : plan.plan.ranks[d].pixel_ranges) {
      // Distinct rows -> the pooled rows of their first use.
      const auto s = source_rows(plan.dedup, plan.plan.frames, range);
      ranges.insert(ranges.end(), s.begin(), s.end());
    }
    for (const RowRange& range : ranges) {
      // A merged range may run over a replica boundary: split it there.
      int64_t begin = range.begin;
      while (begin < range.end) {
        const int64_t q = plan.replica_of_patch_row(begin);
        const int64_t end = std::min(range.end, bounds[q + 1]);
        const int64_t source = q * plan.cp + d % plan.cp;
        if (source == rank) {
          r.send_ranges.push_back({begin - bounds[q], end - bounds[q]});
          r.send_counts[d] += end - begin;
        }
        if (d == rank) {
          r.recv_counts[source] += end - begin;
        }
        begin = end;
      }
    }
  }
  return r;
}

namespace {

// The mesh ranks that consume pooled token `t` (ascending).
struct Consumers {
  const MeshPlan& plan;
  const std::vector<std::vector<int64_t>>& owners;

  // [first, last) of the consumers when they are all of the replica's
  // ranks; a single rank with owners.
  std::pair<int64_t, int64_t> of(int64_t t) const {
    const int64_t q = plan.replica_of_token(t);
    if (owners.empty()) {
      return {q * plan.cp, (q + 1) * plan.cp};
    }
    const int64_t c = owners[static_cast<size_t>(q)]
                            [static_cast<size_t>(t - plan.replica_tokens[q])];
    return {q * plan.cp + c, q * plan.cp + c + 1};
  }
};

void check_owners(
    const MeshPlan& plan, const std::vector<std::vector<int64_t>>& owners) {
  const char* fn = "mesh_output_route";
  if (owners.empty()) {
    return;
  }
  FRAMESHARD_CHECK(
      static_cast<int64_t>(owners.size()) == plan.dp,
      fn,
      "expected owners for each of the ",
      plan.dp,
      " replicas, got ",
      owners.size());
  for (int64_t q = 0; q < plan.dp; ++q) {
    const std::vector<int64_t>& o = owners[static_cast<size_t>(q)];
    const int64_t tokens = plan.replica_tokens[q + 1] - plan.replica_tokens[q];
    FRAMESHARD_CHECK(
        static_cast<int64_t>(o.size()) == tokens,
        fn,
        "expected an owner for each of replica ",
        q,
        "'s ",
        tokens,
        " visual tokens, got ",
        o.size());
    for (int64_t c : o) {
      FRAMESHARD_CHECK(
          c >= 0 && c < plan.cp,
          fn,
          "expected owners (cp ranks) in [0, ",
          plan.cp,
          "), got ",
          c,
          " for replica ",
          q);
    }
  }
}

}  // namespace

OwnerRoute mesh_output_route(
    const MeshPlan& plan,
    int64_t rank,
    const std::vector<std::vector<int64_t>>& owners) {
  const char* fn = "mesh_output_route";
  const int64_t world = plan.dp * plan.cp;
  FRAMESHARD_CHECK(
      rank >= 0 && rank < world,
      fn,
      "expected a mesh rank in [0, ",
      world,
      "), got ",
      rank);
  FRAMESHARD_CHECK(
      plan.plan.sharded(),
      fn,
      "expected a sharded plan, got the replicated path (",
      plan.plan.reason,
      ")");
  check_owners(plan, owners);
  const Consumers consumers{plan, owners};
  if (!plan.dedup.identity()) {
    UseConsumers uses;
    uses.source = plan.dedup.token_source;
    for (int64_t t = 0; t < plan.dedup.tokens; ++t) {
      const auto [first, last] = consumers.of(t);
      uses.first.push_back(first);
      uses.last.push_back(last);
    }
    return route_uses(plan.plan, uses, rank);
  }
  OwnerRoute r;
  r.send_counts.assign(static_cast<size_t>(world), 0);
  r.recv_counts.assign(static_cast<size_t>(world), 0);
  // Each local row into the bucket of every rank that consumes it.
  const std::vector<int64_t> mine = encoded_tokens(plan.plan, rank);
  std::vector<std::vector<int64_t>> buckets(static_cast<size_t>(world));
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto [first, last] = consumers.of(mine[i]);
    for (int64_t d = first; d < last; ++d) {
      buckets[static_cast<size_t>(d)].push_back(static_cast<int64_t>(i));
    }
  }
  for (int64_t d = 0; d < world; ++d) {
    const auto& b = buckets[static_cast<size_t>(d)];
    r.send_order.insert(r.send_order.end(), b.begin(), b.end());
    r.send_counts[d] = static_cast<int64_t>(b.size());
  }
  // What arrives: every source's rows this rank consumes, in its order.
  std::vector<int64_t> arrived;
  for (int64_t s = 0; s < world; ++s) {
    for (int64_t t : encoded_tokens(plan.plan, s)) {
      const auto [first, last] = consumers.of(t);
      if (rank >= first && rank < last) {
        arrived.push_back(t);
        ++r.recv_counts[s];
      }
    }
  }
  internal::set_arrival_order(arrived, r);
  return r;
}

}  // namespace frameshard
