// !!! Internal header of frameshard::runtime, not installed. !!!
// the consensus step of frameshard::encode. Before any payload
// moves, every rank contributes one fixed-size record (status, plan
// fingerprint, output rows, dtype, widths, requires-grad, grad mode, a
// truncated error message) to ONE equal-size all-gather; every rank then
// runs the same checks over the same records, so a failure or disagreement
// on any rank raises the same error text (after the "[rank r/W] " prefix) on
// every rank instead of leaving peers blocked in the next collective.
// Defined in src/runtime/consensus.cpp.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/runtime/process_group.h>

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace internal {

/// Bytes of a rank's error message that travel (longer ones are cut).
constexpr int64_t kConsensusMessageBytes = 256;
/// Output widths listed individually in the record (all are hashed).
constexpr int64_t kConsensusListedWidths = 8;
/// Grid rows a grid disagreement exchanges to name the differing row (the
/// record carries every rank's row count and a hash of all its rows).
constexpr int64_t kConsensusGridRows = 4096;

/// The bits of a 64-bit hash as a record word, and back (the records are
/// int64 tensors).
int64_t as_word(uint64_t v);
uint64_t as_hash(int64_t w);

/// A rank's error message in a record of int64 words: its length at w[0],
/// then its bytes (cut to kConsensusMessageBytes) from w[1] on, so
/// 1 + kConsensusMessageBytes / 8 words (the consensus, the mesh metadata
/// and agree_values records).
void pack_message(const std::string& text, int64_t* w);
/// Inverse of pack_message (a length outside [0, kConsensusMessageBytes]
/// is clamped).
std::string unpack_message(const int64_t* w);

struct ConsensusRecord {
  bool ok = true;
  std::string error;            // why this rank failed (ok == false)
  uint64_t fingerprint = 0;     // plan fingerprint (0 if no plan)
  int64_t path = -1;            // 0 sharded, 1 replicated, -1 unknown
  int64_t rows = -1;            // rows this rank returns / sends
  int64_t dtype = -1;           // c10::ScalarType of the outputs, -1 unknown
  std::vector<int64_t> widths;  // feature width of each output
  bool requires_grad = false;   // the fused local output needs a gradient
  bool grad_mode = true;        // torch::GradMode::is_enabled()
  /// The grid_thw the rank planned from (has_grid), so that ranks whose
  /// plans differ because their grids do learn which row differs.
  bool has_grid = false;
  std::vector<GridThw> grid;
};

/// How a failure agreed on reads after the rank prefix: "rank 2 failed
/// <first_error>", or with several failed ranks (ascending) "ranks 0, 2
/// failed; rank 0 failed <first_error>".
std::string failures_text(
    const std::vector<int>& failed, const std::string& first_error);

/// How grids `a` (rank `ra`) and `b` (rank `rb`) differ, after "ranks
/// disagree on the plan: ": "grid_thw row 3: rank 0 has (1, 32, 32), rank 1
/// has (1, 32, 30)" for the first differing row, else (one a prefix of the
/// other) "grid_thw rows: rank 0 has 4, rank 1 has 3"; "" when equal.
std::string grid_difference(
    int ra,
    const std::vector<GridThw>& a,
    int rb,
    const std::vector<GridThw>& b);

/// Hash of every row of `grid` (and their count), for the record.
uint64_t grid_hash(const std::vector<GridThw>& grid);

/// Collective over `group`, called by run_consensus on every rank once the
/// records show that rank `peer`'s grid differs from rank 0's: every rank
/// sends its first min(max(rows), kConsensusGridRows) grid rows (`rows[q]`:
/// rank q's row count, -1 for a rank without a grid) in one equal-size
/// all-gather; returns the difference of rank 0's and rank `peer`'s grids
/// (grid_difference, or which rows lie beyond those compared).
std::string exchange_grid_difference(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    const std::vector<int64_t>& rows,
    int peer,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn);

/// Exchanges `mine` and checks all records. Collective over `group`: one
/// equal-size all-gather of the records on every rank, and when ranks that
/// send a grid (has_grid) disagree on it, one more (every rank sees that
/// alike): an all-gather of the grids (at most kConsensusGridRows rows
/// each), so that the error names the first differing row
/// (grid_difference). Every check after the exchange runs on the same
/// records everywhere. `expected_rows[q]` is what the (agreed) plan says
/// rank q contributes. Raises c10::Error prefixed "frameshard::<fn>: [rank
/// r/W] " on any failure or disagreement; returns every rank's record
/// otherwise. A record of dtype -1 (a rank that ran no tower: a text-only
/// replica on encode_mesh's replicated path) takes no part in the dtype,
/// output-count and width checks. `device` holds the exchanged buffer (CPU
/// for Gloo, the current CUDA device for NCCL). `subject` names what the
/// fingerprint is of in the disagreement error ("plan", "config").
std::vector<ConsensusRecord> run_consensus(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    const std::vector<int64_t>& expected_rows,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn,
    const char* subject = "plan");

}  // namespace internal
}  // namespace frameshard
