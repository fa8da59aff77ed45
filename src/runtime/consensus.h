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
};

/// Exchanges `mine` and checks all records. `expected_rows[q]` is what the
/// (agreed) plan says rank q contributes. Raises c10::Error prefixed
/// "frameshard::<fn>: [rank r/W] " on any failure or disagreement; returns
/// every rank's record otherwise. A record of dtype -1 (a rank that ran no
/// tower: a text-only replica on encode_mesh's replicated path) takes no
/// part in the dtype, output-count and width checks. `device` holds the
/// exchanged buffer (CPU for Gloo, the current CUDA device for NCCL). `subject`
/// names what the fingerprint is of in the disagreement error ("plan",
/// "config"). "rank 2 failed <first_error>", or with several failed ranks
/// (ascending) "ranks 0, 2 failed; rank 0 failed <first_error>": how a failure
/// agreed on reads after the rank prefix.
std::string failures_text(
    const std::vector<int>& failed, const std::string& first_error);

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
