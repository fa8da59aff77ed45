// Owner-routed visual embeddings: owners and all-to-all routes
// (frameshard/owner_route.h).
#include <frameshard/error.h>
#include <frameshard/owner_route.h>

#include "core/arrival_order.h"

#include <algorithm>
#include <numeric>

namespace frameshard {

std::string to_string(SequenceSplit s) {
  return s == SequenceSplit::kContiguous ? "contiguous" : "load_balanced";
}

SequenceSplit parse_sequence_split(const std::string& name, const char* field) {
  if (name == "contiguous") {
    return SequenceSplit::kContiguous;
  }
  FRAMESHARD_CHECK(
      name == "load_balanced",
      "parse_sequence_split",
      field,
      ": expected contiguous or load_balanced, got '",
      name,
      "'");
  return SequenceSplit::kLoadBalanced;
}

int64_t position_owner(
    int64_t position, int64_t seq_len, int64_t cp, SequenceSplit split) {
  const int64_t parts = split == SequenceSplit::kContiguous ? cp : 2 * cp;
  FRAMESHARD_CHECK(
      cp >= 1 && seq_len > 0 && seq_len % parts == 0,
      "position_owner",
      "expected a sequence length that is a positive multiple of ",
      parts,
      " (",
      to_string(split),
      " split over cp ",
      cp,
      "), got ",
      seq_len);
  FRAMESHARD_CHECK(
      position >= 0 && position < seq_len,
      "position_owner",
      "expected a position in [0, ",
      seq_len,
      "), got ",
      position);
  const int64_t chunk = position / (seq_len / parts);
  if (split == SequenceSplit::kContiguous) {
    return chunk;
  }
  return chunk < cp ? chunk : 2 * cp - 1 - chunk;
}

int64_t padded_sequence_length(
    int64_t seq_len, int64_t cp, SequenceSplit split) {
  FRAMESHARD_CHECK(
      cp >= 1, "padded_sequence_length", "expected cp >= 1, got ", cp);
  FRAMESHARD_CHECK(
      seq_len >= 0,
      "padded_sequence_length",
      "expected a sequence length >= 0, got ",
      seq_len);
  const int64_t parts = split == SequenceSplit::kContiguous ? cp : 2 * cp;
  return (seq_len + parts - 1) / parts * parts;
}

std::vector<int64_t> sequence_chunk_positions(
    int64_t seq_len, int64_t cp, int64_t rank, SequenceSplit split) {
  const int64_t total = padded_sequence_length(seq_len, cp, split);
  FRAMESHARD_CHECK(
      rank >= 0 && rank < cp,
      "sequence_chunk_positions",
      "expected a rank in [0, ",
      cp,
      "), got ",
      rank);
  // Load-balanced: rank r's second chunk mirrors its first, so every rank
  // holds as many early (cheap under a causal mask) as late positions.
  const std::vector<int64_t> chunks =
      split == SequenceSplit::kContiguous
          ? std::vector<int64_t>{rank}
          : std::vector<int64_t>{rank, 2 * cp - 1 - rank};
  const int64_t size = total / (static_cast<int64_t>(chunks.size()) * cp);
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(size) * chunks.size());
  for (int64_t c : chunks) {
    for (int64_t i = 0; i < size; ++i) {
      positions.push_back(c * size + i);
    }
  }
  return positions;
}

std::vector<int64_t> visual_token_owners(
    const std::vector<int64_t>& media_positions,
    int64_t seq_len,
    int64_t cp,
    SequenceSplit split) {
  std::vector<int64_t> owner;
  owner.reserve(media_positions.size());
  for (size_t i = 0; i < media_positions.size(); ++i) {
    FRAMESHARD_CHECK(
        i == 0 || media_positions[i] > media_positions[i - 1],
        "visual_token_owners",
        "expected strictly ascending media positions, got ",
        media_positions[i],
        " after ",
        i == 0 ? 0 : media_positions[i - 1]);
    owner.push_back(position_owner(media_positions[i], seq_len, cp, split));
  }
  return owner;
}

std::vector<int64_t> encoded_tokens(const ShardPlan& plan, int64_t rank) {
  FRAMESHARD_CHECK(
      rank >= 0 && rank < static_cast<int64_t>(plan.ranks.size()),
      "encoded_tokens",
      "expected a rank in [0, ",
      plan.ranks.size(),
      "), got ",
      rank);
  const RankShard& rs = plan.ranks[static_cast<size_t>(rank)];
  const int64_t merge2 = plan.frames.layout.spatial_merge_size *
                         plan.frames.layout.spatial_merge_size;
  std::vector<int64_t> tokens;
  tokens.reserve(static_cast<size_t>(rs.real_tokens));
  for (size_t local = 0; local < rs.units.size(); ++local) {
    const FrameUnit& unit =
        plan.frames.units[static_cast<size_t>(rs.units[local])];
    // A piece of a split frame encodes only its own tokens.
    int64_t first = 0;
    int64_t end = unit.tokens;
    for (const FramePiece& p : rs.pieces) {
      if (p.frame == static_cast<int64_t>(local)) {
        first = p.begin / merge2;
        end = p.end / merge2;
      }
    }
    for (int64_t t = first; t < end; ++t) {
      tokens.push_back(unit.token_offset + t);
    }
  }
  return tokens;
}

OwnerRoute owner_route(
    const ShardPlan& plan, const std::vector<int64_t>& owner, int64_t rank) {
  const int64_t world = plan.options.world;
  FRAMESHARD_CHECK(
      plan.sharded(),
      "owner_route",
      "expected a sharded plan, got the replicated path (",
      plan.reason,
      ")");
  FRAMESHARD_CHECK(
      static_cast<int64_t>(owner.size()) == plan.frames.total_tokens,
      "owner_route",
      "expected an owner for each of the ",
      plan.frames.total_tokens,
      " visual tokens, got ",
      owner.size());
  for (int64_t o : owner) {
    FRAMESHARD_CHECK(
        o >= 0 && o < world,
        "owner_route",
        "expected owners in [0, ",
        world,
        "), got ",
        o);
  }
  OwnerRoute r;
  r.send_counts.assign(static_cast<size_t>(world), 0);
  r.recv_counts.assign(static_cast<size_t>(world), 0);
  const std::vector<int64_t> mine = encoded_tokens(plan, rank);
  std::vector<int64_t> local(mine.size());
  std::iota(local.begin(), local.end(), 0);
  std::stable_sort(local.begin(), local.end(), [&](int64_t a, int64_t b) {
    return owner[static_cast<size_t>(mine[static_cast<size_t>(a)])] <
           owner[static_cast<size_t>(mine[static_cast<size_t>(b)])];
  });
  r.send_order = local;
  for (int64_t t : mine) {
    ++r.send_counts[static_cast<size_t>(owner[static_cast<size_t>(t)])];
  }
  // What arrives: every source's rows owned here, in the source's order.
  std::vector<int64_t> arrived;
  for (int64_t q = 0; q < world; ++q) {
    for (int64_t t : encoded_tokens(plan, q)) {
      if (owner[static_cast<size_t>(t)] == rank) {
        arrived.push_back(t);
        ++r.recv_counts[static_cast<size_t>(q)];
      }
    }
  }
  internal::set_arrival_order(arrived, r);
  return r;
}

namespace internal {

void set_arrival_order(const std::vector<int64_t>& arrived, OwnerRoute& r) {
  r.recv_order.resize(arrived.size());
  std::iota(r.recv_order.begin(), r.recv_order.end(), 0);
  std::sort(
      r.recv_order.begin(), r.recv_order.end(), [&](int64_t a, int64_t b) {
        return arrived[static_cast<size_t>(a)] <
               arrived[static_cast<size_t>(b)];
      });
  r.tokens.clear();
  r.tokens.reserve(arrived.size());
  for (int64_t i : r.recv_order) {
    r.tokens.push_back(arrived[static_cast<size_t>(i)]);
  }
}

}  // namespace internal

}  // namespace frameshard
