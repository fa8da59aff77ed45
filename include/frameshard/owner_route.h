// File: frameshard/owner_route.h
//
// Owner-routed visual embeddings: instead of all-gathering every visual
// embedding row to every CP rank (which then keeps only the rows of its own
// sequence shard), send each row only to the rank whose sequence shard holds
// its position. Each row is consumed by exactly one rank, so an all-to-all
// moves about 1/CP of the all-gather's bytes and no rank holds the full
// [total_tokens, hidden] tensor.
//
//   sequence_chunk_positions  the positions a CP rank holds under either
//                        split, and the padded length they cover (the
//                        Python layer and the C++ trainer both use these);
//   visual_token_owners  which CP rank owns each visual token, from the
//                        sequence positions of the visual tokens and the
//                        sequence-CP split (contiguous, or the load-balanced
//                        2 x CP chunks: rank r holds chunks r and 2CP-1-r);
//   owner_route          for one rank of a sharded plan: the order in which
//                        its encoded rows go out (grouped by destination),
//                        how many rows go to and come from each rank, and
//                        the order that puts the received rows into
//                        ascending token order, which is the order of the
//                        visual tokens in the rank's local sequence (both
//                        splits keep a rank's positions ascending).
//
// Pure functions over value types: every rank computes every route from the
// same plan and positions without communicating.
//
// Usage:
//   auto owner = frameshard::visual_token_owners(media_positions, seq_len, cp,
//                                                SequenceSplit::kLoadBalanced);
//   frameshard::OwnerRoute r = frameshard::owner_route(plan, owner, rank);
//   // send rows local.index_select(r.send_order), r.send_counts per peer;
//   // receive r.recv_counts per peer; out = recv.index_select(r.recv_order)
#pragma once

#include <frameshard/plan.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

enum class SequenceSplit {
  kContiguous,    // rank r holds [r * L / cp, (r + 1) * L / cp)
  kLoadBalanced,  // 2 x cp chunks, rank r holds chunks r and 2cp-1-r
};
std::string to_string(SequenceSplit s);
/// "contiguous" | "load_balanced"; frameshard::Error naming `field`
/// otherwise.
SequenceSplit parse_sequence_split(
    const std::string& name, const char* field = "sequence_split");

/// The CP rank holding sequence position `position` of a sequence of
/// `seq_len` (a multiple of cp, 2 * cp for the load-balanced split).
int64_t position_owner(
    int64_t position, int64_t seq_len, int64_t cp, SequenceSplit split);

/// `seq_len` rounded up to a multiple of the split's chunk count (2 * cp
/// load-balanced, cp contiguous): the length a CP rank's layout pads the
/// sequence to (0 stays 0). frameshard::Error for seq_len < 0 or cp < 1.
int64_t padded_sequence_length(
    int64_t seq_len, int64_t cp, SequenceSplit split);

/// The global positions, ascending, of rank `rank`'s rows of a sequence of
/// `seq_len` padded to padded_sequence_length(seq_len, cp, split): chunks
/// rank and 2cp-1-rank of 2cp (load-balanced), chunk rank of cp
/// (contiguous). frameshard::Error for rank outside [0, cp).
std::vector<int64_t> sequence_chunk_positions(
    int64_t seq_len, int64_t cp, int64_t rank, SequenceSplit split);

/// Owner of every visual token: media_positions[i] is the sequence position
/// of the i-th visual token (strictly ascending, < seq_len).
std::vector<int64_t> visual_token_owners(
    const std::vector<int64_t>& media_positions,
    int64_t seq_len,
    int64_t cp,
    SequenceSplit split);

struct OwnerRoute {
  /// The rank's real encoded rows (local order) reordered by destination
  /// rank, stable: send row i = local row send_order[i].
  std::vector<int64_t> send_order;
  std::vector<int64_t> send_counts;  // per destination rank
  std::vector<int64_t> recv_counts;  // per source rank
  /// Received rows (concatenated in source-rank order) -> ascending token
  /// order: output row i = received row recv_order[i].
  std::vector<int64_t> recv_order;
  /// Global token index of each output row (ascending).
  std::vector<int64_t> tokens;
};

/// The route of rank `rank` in a sharded `plan` (frameshard::Error if the
/// plan is replicated, `owner` has not plan.frames.total_tokens entries or
/// names a rank outside [0, plan.options.world)).
OwnerRoute owner_route(
    const ShardPlan& plan, const std::vector<int64_t>& owner, int64_t rank);

/// The global token indices of rank `rank`'s real encoded rows, in its
/// local output order (its units ascending, each unit's tokens in order;
/// of a split frame only its piece's tokens).
std::vector<int64_t> encoded_tokens(const ShardPlan& plan, int64_t rank);

}  // namespace frameshard
