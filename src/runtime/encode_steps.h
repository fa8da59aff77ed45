// !!! Internal header of frameshard::runtime, not installed. !!!
// The steps frameshard::encode (runtime/encode.h) and frameshard::encode_mesh
// (runtime/mesh_encode.h) share, so that both feed the tower, check its
// outputs, fill their consensus record and keep a rank in the backward
// collectives the same way:
//   shard_tower_input    a rank's real pixel rows + its floor and dummy
//                        zero frames, local grid_thw, cu_seqlens, pieces;
//   run_tower_step       the tower (fault point "tower"), the output
//                        checks, and on a sharded rank the real rows only,
//                        fused along the feature dim for ONE collective;
//   describe_outputs     what the consensus record says about them;
//   joined_for_backward  the fresh-leaf trick (Megatron-Bridge #4784);
//   split_widths, row_bytes, owner_fingerprint, select_rows;
//   distinct_pixels, expand_uses  dedup's two ends (frameshard/dedup.h).
// Nothing here is collective. Defined in src/runtime/encode_steps.cpp.
#pragma once

#include <frameshard/dedup.h>
#include <frameshard/plan.h>
#include <frameshard/tower.h>

#include "runtime/consensus.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace internal {

/// "[2, 3]": a tensor's shape for error messages.
std::string shape_text(const at::Tensor& t);

/// What the tower of `shard` receives: `real` (its real frames' pixel rows
/// in local order, concatenated once with the zero floor and dummy rows),
/// the shard's grid, cu_seqlens and pieces. `like` gives dtype, device and
/// feature width when `real` is empty (no real frames). No exchange set.
TowerInput shard_tower_input(
    const RankShard& shard,
    const std::vector<at::Tensor>& real,
    const at::Tensor& like);

/// The tower's outputs as the collectives need them.
struct LocalOutputs {
  /// As returned; on a sharded rank narrowed to the real rows.
  std::vector<at::Tensor> outputs;
  std::vector<int64_t> widths;  // feature width of each output
  at::Tensor fused;             // sharded: outputs fused along dim 1
};

/// Runs `tower` on `in`, checks every output ([expected_rows, hidden_i], one
/// dtype, one device; `rows_meaning` says what the rows are), and with
/// `real_rows >= 0` (a sharded rank) keeps the first real_rows rows -- real
/// frames come first, floor and dummy rows are the tail -- and fuses them.
/// `stage` names the running step for the consensus message.
LocalOutputs run_tower_step(
    const VisionTower& tower,
    const TowerInput& in,
    int64_t expected_rows,
    const char* rows_meaning,
    int64_t real_rows,
    int rank,
    const std::string& prefix,
    std::string& stage);

/// Sets mine.path, rows, dtype, widths and requires_grad from `lo` (rows:
/// the fused rows on the sharded path, the outputs' otherwise).
void describe_outputs(
    const LocalOutputs& lo, bool sharded, ConsensusRecord& mine);

/// True if any rank's record says its local output needs a gradient.
bool any_requires_grad(const std::vector<ConsensusRecord>& records);

/// `send` itself, or, when another rank will run the backward collective
/// (any_grad) and `send` needs no gradient, a fresh leaf that does: the
/// backward all-to-all needs every rank, so this rank's part of the graph
/// must exist too (Megatron-Bridge #4784: 0-image ranks hung). The leaf's
/// gradient is discarded.
at::Tensor joined_for_backward(const at::Tensor& send, bool any_grad);

/// Splits fused [rows, sum(widths)] back into one tensor per output.
std::vector<at::Tensor> split_widths(
    const at::Tensor& fused, const std::vector<int64_t>& widths);

/// Bytes of one fused output row.
int64_t row_bytes(const std::vector<int64_t>& widths, at::ScalarType dtype);

/// Fingerprint of an owner map (0 when empty): what ranks must agree on
/// besides the plan.
uint64_t owner_fingerprint(const std::vector<int64_t>& owner);

/// Indices t with owner[t] == rank, ascending.
std::vector<int64_t> owned_rows(
    const std::vector<int64_t>& owner, int64_t rank);

/// Every output's rows `rows` (index_select, on the outputs' device).
void select_rows(
    std::vector<at::Tensor>& outputs, const std::vector<int64_t>& rows);

/// The pixel rows of `dedup`'s distinct units, in order (pixel_values
/// itself when nothing repeats).
at::Tensor distinct_pixels(
    const at::Tensor& pixel_values, const FrameDedup& dedup);

/// Distinct output rows -> one row per use token (index_select, whose
/// backward sums the gradients of a row's uses); nothing when nothing
/// repeats.
void expand_uses(const FrameDedup& dedup, std::vector<at::Tensor>& outputs);

}  // namespace internal
}  // namespace frameshard
