// File: tests/testing/token_owners.h
//
// An owner map for the owner-routed tests (frameshard/owner_route.h): the
// visual tokens spread through a sequence with text between them (token i
// at position 2i + 1), the sequence padded to a multiple of 2 * world so
// both sequence splits apply, each token owned by the rank whose sequence
// shard holds its position.
//
// Usage:
//   spec.token_owner = testing::spread_token_owners(
//       frames.total_tokens, world, SequenceSplit::kLoadBalanced);
//   spec.route_to_owner = true;
//   EXPECT_EQ(result.tokens, testing::tokens_owned_by(spec.token_owner, r));
#pragma once

#include <frameshard/owner_route.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace testing {

inline std::vector<int64_t> spread_token_owners(
    int64_t tokens, int world, SequenceSplit split) {
  std::vector<int64_t> pos(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) {
    pos[static_cast<size_t>(i)] = 2 * i + 1;
  }
  const int64_t pad = 2 * world;
  const int64_t seq = (2 * tokens + pad - 1) / pad * pad;
  return visual_token_owners(pos, seq, world, split);
}

/// The tokens rank `rank` owns, ascending: what an owner-routed encode
/// delivers to it.
inline std::vector<int64_t> tokens_owned_by(
    const std::vector<int64_t>& owner, int64_t rank) {
  std::vector<int64_t> tokens;
  for (size_t t = 0; t < owner.size(); ++t) {
    if (owner[t] == rank) {
      tokens.push_back(static_cast<int64_t>(t));
    }
  }
  return tokens;
}

}  // namespace testing
}  // namespace frameshard
