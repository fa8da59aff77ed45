// The metadata exchange of encode_mesh (runtime/mesh_metadata.h): a record
// per rank as int64 words, gathered with their lengths, then one set of
// checks every rank runs over the same records.
#include "runtime/mesh_metadata.h"

#include <frameshard/error.h>
#include <frameshard/runtime/gather.h>

#include "core/fingerprint.h"
#include "runtime/collectives.h"
#include "runtime/consensus.h"

#include <c10/util/Exception.h>

#include <cstring>

namespace frameshard {
namespace internal {

namespace {

constexpr int64_t kMeshMagic = 0x46534e4d45303033;  // "FSNME003"
enum MeshWord : int64_t {
  kMwMagic = 0,
  kMwLength,  // words of the whole record
  kMwOk,
  kMwDp,
  kMwCp,
  kMwOptions,
  kMwTrainable,
  kMwDtype,
  kMwFeatures,
  kMwTokens,
  kMwMedia,  // grid rows that follow the header, 3 words each
  kMwOwnerMode,
  kMwOwnerFingerprint,
  kMwOwnerRuns,  // (owner, count) runs after the grid, 2 words each
  kMwKeysFingerprint,
  kMwKeys,          // unit keys after the owner runs, 2 words each
  kMwOtherSeconds,  // bits of a double
  kMwMessageLength,
  kMwMessage,  // kConsensusMessageBytes bytes
  kMwHeader = kMwMessage + kConsensusMessageBytes / 8,
};

int64_t bits_of(double d) {
  int64_t w = 0;
  std::memcpy(&w, &d, sizeof(w));
  return w;
}

std::vector<int64_t> pack_mesh_record(const MeshRecord& r) {
  std::vector<int64_t> w(kMwHeader, 0);
  w[kMwMagic] = kMeshMagic;
  w[kMwOk] = r.ok ? 1 : 0;
  w[kMwDp] = r.dp;
  w[kMwCp] = r.cp;
  w[kMwOptions] = as_word(r.options);
  w[kMwTrainable] = r.tower_trainable ? 1 : 0;
  w[kMwDtype] = r.dtype;
  w[kMwFeatures] = r.features;
  w[kMwTokens] = r.tokens;
  w[kMwMedia] = static_cast<int64_t>(r.grid.size());
  w[kMwOwnerMode] = r.owner_mode ? 1 : 0;
  w[kMwOwnerFingerprint] = as_word(r.owner_fp);
  w[kMwOtherSeconds] = bits_of(r.other_seconds);
  pack_message(r.error, &w[kMwMessageLength]);
  for (const GridThw& g : r.grid) {
    w.insert(w.end(), {g.t, g.h, g.w});
  }
  // Owner maps follow the sequence split, so they are long runs.
  int64_t runs = 0;
  for (size_t i = 0; i < r.owners.size(); ++runs) {
    size_t j = i;
    while (j < r.owners.size() && r.owners[j] == r.owners[i]) {
      ++j;
    }
    w.insert(w.end(), {r.owners[i], static_cast<int64_t>(j - i)});
    i = j;
  }
  w[kMwOwnerRuns] = runs;
  w[kMwKeysFingerprint] = as_word(r.keys_fp);
  w[kMwKeys] = static_cast<int64_t>(r.keys.size());
  for (const UnitKey& k : r.keys) {
    w.insert(w.end(), {as_word(k.hi), as_word(k.lo)});
  }
  w[kMwLength] = static_cast<int64_t>(w.size());
  return w;
}

MeshRecord unpack_mesh_record(
    const int64_t* w, int64_t length, int rank, const std::string& prefix) {
  const bool framed = length >= kMwHeader && w[kMwMagic] == kMeshMagic &&
                      w[kMwLength] == length && w[kMwMedia] >= 0 &&
                      w[kMwOwnerRuns] >= 0 && w[kMwKeys] >= 0 &&
                      length == kMwHeader + 3 * w[kMwMedia] +
                                    2 * w[kMwOwnerRuns] + 2 * w[kMwKeys];
  TORCH_CHECK(
      framed,
      prefix,
      "rank ",
      rank,
      " sent a metadata record of another format (mixed frameshard "
      "builds?)");
  MeshRecord r;
  r.ok = w[kMwOk] != 0;
  r.dp = w[kMwDp];
  r.cp = w[kMwCp];
  r.options = as_hash(w[kMwOptions]);
  r.tower_trainable = w[kMwTrainable] != 0;
  r.dtype = w[kMwDtype];
  r.features = w[kMwFeatures];
  r.tokens = w[kMwTokens];
  r.owner_mode = w[kMwOwnerMode] != 0;
  r.owner_fp = as_hash(w[kMwOwnerFingerprint]);
  std::memcpy(&r.other_seconds, &w[kMwOtherSeconds], sizeof(double));
  r.error = unpack_message(&w[kMwMessageLength]);
  const int64_t* p = w + kMwHeader;
  for (int64_t i = 0; i < w[kMwMedia]; ++i, p += 3) {
    r.grid.push_back({p[0], p[1], p[2]});
  }
  for (int64_t i = 0; i < w[kMwOwnerRuns]; ++i, p += 2) {
    TORCH_CHECK(
        p[1] > 0 && static_cast<int64_t>(r.owners.size()) + p[1] <= r.tokens,
        prefix,
        "rank ",
        rank,
        " sent a token_owner that does not fit its ",
        r.tokens,
        " visual tokens");
    r.owners.insert(r.owners.end(), static_cast<size_t>(p[1]), p[0]);
  }
  r.keys_fp = as_hash(w[kMwKeysFingerprint]);
  for (int64_t i = 0; i < w[kMwKeys]; ++i, p += 2) {
    r.keys.push_back({as_hash(p[0]), as_hash(p[1])});
  }
  return r;
}

std::string pixel_dtype_name(int64_t d) {
  if (d < 0 || d >= static_cast<int64_t>(c10::ScalarType::NumOptions)) {
    return "none";
  }
  return c10::toString(static_cast<c10::ScalarType>(d));
}

// Everything the ranks must agree on mesh-wide, against rank 0.
void check_mesh_wide(
    const std::vector<MeshRecord>& all, const std::string& prefix) {
  const MeshRecord& a = all[0];
  for (size_t q = 1; q < all.size(); ++q) {
    const MeshRecord& b = all[q];
    TORCH_CHECK(
        a.dp == b.dp && a.cp == b.cp,
        prefix,
        "ranks disagree on the mesh: rank 0 has dp=",
        a.dp,
        " cp=",
        a.cp,
        ", rank ",
        q,
        " has dp=",
        b.dp,
        " cp=",
        b.cp);
    TORCH_CHECK(
        a.options == b.options,
        prefix,
        "ranks disagree on the plan options: rank 0 has fingerprint ",
        fingerprint_hex(a.options),
        ", rank ",
        q,
        " has ",
        fingerprint_hex(b.options),
        " (different frame_sharding options?)");
    TORCH_CHECK(
        a.tower_trainable == b.tower_trainable,
        prefix,
        "ranks disagree on tower_trainable: rank 0 has ",
        a.tower_trainable ? "true" : "false",
        ", rank ",
        q,
        " has ",
        b.tower_trainable ? "true" : "false");
    TORCH_CHECK(
        a.dtype == b.dtype,
        prefix,
        "ranks disagree on the pixel_values dtype: rank 0 has ",
        pixel_dtype_name(a.dtype),
        ", rank ",
        q,
        " has ",
        pixel_dtype_name(b.dtype),
        " (every rank, a text-only replica's too, passes one dtype)");
    TORCH_CHECK(
        a.features == b.features,
        prefix,
        "ranks disagree on the pixel_values feature width: rank 0 has ",
        a.features,
        ", rank ",
        q,
        " has ",
        b.features);
  }
}

// Within each replica: one grid and one owner map, against its cp rank 0.
void check_replicas(
    const std::vector<MeshRecord>& all, const std::string& prefix) {
  const int64_t cp = all[0].cp;
  const auto world = static_cast<int64_t>(all.size());
  for (int64_t first = 0; first < world; first += cp) {
    const int64_t replica = first / cp;
    const MeshRecord& a = all[static_cast<size_t>(first)];
    for (int64_t r = first + 1; r < first + cp; ++r) {
      const MeshRecord& b = all[static_cast<size_t>(r)];
      TORCH_CHECK(
          a.grid == b.grid,
          prefix,
          "cp ranks of replica ",
          replica,
          " disagree on ",
          grid_difference(
              static_cast<int>(first), a.grid, static_cast<int>(r), b.grid),
          " (every cp rank of a replica passes that replica's inputs)");
      TORCH_CHECK(
          a.owner_mode == b.owner_mode && a.owner_fp == b.owner_fp,
          prefix,
          "cp ranks of replica ",
          replica,
          " disagree on token_owner: rank ",
          first,
          a.owner_mode ? " has fingerprint " + fingerprint_hex(a.owner_fp)
                       : std::string(" passes none"),
          ", rank ",
          r,
          b.owner_mode ? " has fingerprint " + fingerprint_hex(b.owner_fp)
                       : std::string(" passes none"));
      TORCH_CHECK(
          a.keys_fp == b.keys_fp,
          prefix,
          "cp ranks of replica ",
          replica,
          " disagree on their frames' dedup keys: rank ",
          first,
          " has fingerprint ",
          fingerprint_hex(a.keys_fp),
          ", rank ",
          r,
          " has ",
          fingerprint_hex(b.keys_fp),
          " (every cp rank of a replica passes the same pixel rows)");
    }
  }
  // Owner routing is all or nothing: a replica with visual tokens and no
  // map would have no consumer for its rows.
  int64_t with = -1;
  int64_t without = -1;
  for (int64_t first = 0; first < world; first += cp) {
    const MeshRecord& a = all[static_cast<size_t>(first)];
    if (a.owner_mode && with < 0) {
      with = first / cp;
    }
    if (!a.owner_mode && a.tokens > 0 && without < 0) {
      without = first / cp;
    }
  }
  TORCH_CHECK(
      with < 0 || without < 0,
      prefix,
      "expected a token_owner from every replica with visual tokens once one "
      "passes it (replica ",
      with,
      " does), got none from replica ",
      without);
}

}  // namespace

// A cp_group must be this replica's CP group: cp ranks, this rank at its
// cp rank (the CP-only step runs encode over it).
void check_cp_group(
    const ProcessGroupPtr& cp_group,
    int64_t cp,
    int rank,
    const std::string& prefix) {
  if (!cp_group) {
    return;
  }
  TORCH_CHECK(
      cp_group->getSize() == cp && cp_group->getRank() == rank % cp,
      prefix,
      "expected cp_group to be this replica's CP group (",
      cp,
      " ranks, this rank at cp rank ",
      rank % cp,
      "), got ",
      cp_group->getSize(),
      " ranks with this rank at ",
      cp_group->getRank());
}

void check_token_owner(
    const std::vector<int64_t>& owner,
    int64_t tokens,
    int64_t cp,
    const std::string& prefix) {
  if (owner.empty()) {
    return;
  }
  TORCH_CHECK(
      static_cast<int64_t>(owner.size()) == tokens,
      prefix,
      "expected token_owner to have one entry per visual token of this "
      "replica (",
      tokens,
      "), got ",
      owner.size());
  for (int64_t o : owner) {
    TORCH_CHECK(
        o >= 0 && o < cp,
        prefix,
        "expected token_owner entries (cp ranks) in [0, ",
        cp,
        "), got ",
        o);
  }
}

uint64_t plan_options_fingerprint(
    const PlanOptions& plan,
    int64_t dp,
    int64_t cp,
    double mesh_min_gain,
    double exchange_latency_seconds) {
  Fingerprint fp;
  for (int64_t v :
       {dp,
        cp,
        bits_of(mesh_min_gain),
        bits_of(exchange_latency_seconds),
        static_cast<int64_t>(plan.partitioner),
        bits_of(plan.cost.a),
        bits_of(plan.cost.b),
        bits_of(plan.cost.c),
        bits_of(plan.cost.window_coef),
        plan.cost.window,
        bits_of(plan.cost.seconds_per_unit),
        plan.min_local_patch_rows,
        plan.layout.spatial_merge_size,
        plan.layout.temporal_patch_size,
        int64_t{plan.policy.enabled},
        plan.policy.min_tokens,
        plan.policy.min_frames,
        static_cast<int64_t>(plan.policy.kind),
        bits_of(plan.policy.gather_bandwidth_gbps),
        plan.policy.gather_row_bytes,
        int64_t{plan.split.enabled},
        plan.split.window_side,
        bits_of(plan.split.exchange_row_cost),
        bits_of(plan.split.min_gain),
        bits_of(plan.split.exchange_fixed_cost)}) {
    fp.add(v);
  }
  return fp.finish();
}

std::vector<MeshRecord> exchange_mesh_records(
    const ProcessGroupPtr& group,
    const MeshRecord& mine,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn) {
  const int world = group->getSize();
  if (world == 1) {
    return {mine};
  }
  const std::string prefix = rank_prefix(fn, group);
  const std::vector<int64_t> words = pack_mesh_record(mine);
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  at::Tensor length =
      at::full({1}, static_cast<int64_t>(words.size()), long_options);
  std::vector<int64_t> counts;
  for (const auto& t : allgather_equal(group, length.to(device), timeout, fn)) {
    counts.push_back(t.cpu().item<int64_t>());
  }
  GatherOptions gopts;
  gopts.timeout = timeout;
  at::Tensor local =
      at::tensor(words, long_options).to(device).reshape({-1, 1});
  at::Tensor all =
      all_gather_rows(local, counts, group, gopts).cpu().contiguous();
  std::vector<MeshRecord> records;
  const int64_t* p = all.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    records.push_back(unpack_mesh_record(p, counts[r], r, prefix));
    p += counts[r];
  }
  return records;
}

void check_mesh_records(
    const std::vector<MeshRecord>& records, const std::string& prefix) {
  std::vector<int> failed;
  for (size_t r = 0; r < records.size(); ++r) {
    if (!records[r].ok) {
      failed.push_back(static_cast<int>(r));
    }
  }
  if (!failed.empty()) {
    TORCH_CHECK(false, prefix, failures_text(failed, records[failed[0]].error));
  }
  check_mesh_wide(records, prefix);
  check_replicas(records, prefix);
}

uint64_t keys_fingerprint(const std::vector<UnitKey>& keys) {
  Fingerprint fp;
  fp.add(static_cast<int64_t>(keys.size()));
  for (const UnitKey& k : keys) {
    fp.add(as_word(k.hi));
    fp.add(as_word(k.lo));
  }
  return fp.finish();
}

std::vector<std::vector<UnitKey>> replica_keys(
    const std::vector<MeshRecord>& records) {
  const int64_t cp = records[0].cp;
  std::vector<std::vector<UnitKey>> keys;
  bool any = false;
  for (size_t first = 0; first < records.size();
       first += static_cast<size_t>(cp)) {
    keys.push_back(records[first].keys);
    any = any || records[first].keys_fp != 0;
  }
  return any ? keys : std::vector<std::vector<UnitKey>>{};
}

std::vector<std::vector<int64_t>> replica_owners(
    const std::vector<MeshRecord>& records) {
  const int64_t cp = records[0].cp;
  std::vector<std::vector<int64_t>> owners;
  bool any = false;
  for (size_t first = 0; first < records.size();
       first += static_cast<size_t>(cp)) {
    owners.push_back(records[first].owners);
    any = any || records[first].owner_mode;
  }
  return any ? owners : std::vector<std::vector<int64_t>>{};
}

}  // namespace internal
}  // namespace frameshard
