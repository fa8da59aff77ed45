// !!! Internal header of frameshard::runtime, not installed. !!!
// Step (a) of frameshard::encode_mesh (runtime/mesh_encode.h): before the
// mesh plan exists, every rank tells every other what its replica holds --
// its grid rows, the pixel dtype and feature width, its owner map (sent by
// the replica's cp rank 0 only, run-length coded; the others send its
// fingerprint), its mesh shape and option fingerprint -- or, if its inputs
// failed the local checks, why. One place (check_mesh_records) then runs
// the same checks over the same records on every rank, so a bad input or a
// disagreement (cp ranks of one replica with different grids, ranks with
// different dtypes, widths, options) raises the same error on every rank
// before any payload moves, instead of leaving peers blocked in the pixel
// all-to-all. Two small collectives: an equal-size all-gather of the
// records' lengths, then all_gather_rows of their int64 words.
// Defined in src/runtime/mesh_metadata.cpp.
#pragma once

#include <frameshard/dedup.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/process_group.h>

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace internal {

struct MeshRecord {
  bool ok = true;
  std::string error;  // why this rank failed (ok == false)
  int64_t dp = 0;     // EncodeOptions::mesh.dp, cp
  int64_t cp = 0;
  uint64_t options = 0;  // plan_options_fingerprint
  bool tower_trainable = false;
  int64_t dtype = -1;         // c10::ScalarType of pixel_values, -1 unknown
  int64_t features = -1;      // pixel_values.size(1)
  int64_t tokens = 0;         // visual tokens of its replica's grid
  std::vector<GridThw> grid;  // its replica's grid rows
  bool owner_mode = false;    // it passes a token_owner
  uint64_t owner_fp = 0;      // owner_fingerprint of its token_owner
  /// Its token_owner, when it sends it (cp rank 0 of its replica; empty on
  /// the other ranks).
  std::vector<int64_t> owners;
  /// Dedup (EncodeOptions::unit_keys): the fingerprint of its keys, and
  /// the keys themselves when it sends them (cp rank 0 of its replica).
  uint64_t keys_fp = 0;
  std::vector<UnitKey> keys;
  /// EncodeOptions::mesh.other_seconds: its predicted rest of the step.
  double other_seconds = 0.0;
};

/// encode_mesh's local checks (c10::Error with `prefix`): a cp_group that
/// is not this replica's CP group (cp ranks, `rank` at rank % cp), and a
/// token_owner without one cp rank in [0, cp) per visual token.
void check_cp_group(
    const ProcessGroupPtr& cp_group,
    int64_t cp,
    int rank,
    const std::string& prefix);
void check_token_owner(
    const std::vector<int64_t>& owner,
    int64_t tokens,
    int64_t cp,
    const std::string& prefix);

/// Fingerprint of everything but the grids that the mesh plan depends on
/// (dp, cp, partitioner, cost model, floor rows, layout, policy, split, the
/// mesh choice's min_gain and exchange latency; not plan.world, which
/// encode_mesh sets).
uint64_t plan_options_fingerprint(
    const PlanOptions& plan,
    int64_t dp,
    int64_t cp,
    double mesh_min_gain,
    double exchange_latency_seconds);

/// Collective over `group`: every rank's record, in rank order (`mine`
/// alone on a group of one). `device` holds the exchanged words.
std::vector<MeshRecord> exchange_mesh_records(
    const ProcessGroupPtr& group,
    const MeshRecord& mine,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn);

/// Raises c10::Error starting with `prefix` on any rank's failure or any
/// disagreement (see the banner); the text after the prefix depends only on
/// the records. Afterwards every record has ok, one dp, cp, options,
/// tower_trainable, dtype, width, and each replica one grid and owner map.
void check_mesh_records(
    const std::vector<MeshRecord>& records, const std::string& prefix);

/// Each replica's unit keys (dp entries) from checked records: empty when
/// the mesh runs without dedup.
std::vector<std::vector<UnitKey>> replica_keys(
    const std::vector<MeshRecord>& records);

/// Fingerprint of a key list (the keys that cp ranks of a replica compare).
uint64_t keys_fingerprint(const std::vector<UnitKey>& keys);

/// Each replica's owner map (dp entries) from checked records: empty maps
/// when no rank passes one.
std::vector<std::vector<int64_t>> replica_owners(
    const std::vector<MeshRecord>& records);

}  // namespace internal
}  // namespace frameshard
