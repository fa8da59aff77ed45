// Each distinct frame once (frameshard/dedup.h): the distinct units of a
// grid by content key, and the one-to-many route of their outputs.
#include <frameshard/dedup.h>
#include <frameshard/error.h>
#include <frameshard/splitmix64.h>

#include "core/fingerprint.h"

#include <algorithm>
#include <unordered_map>

namespace frameshard {

namespace {

struct KeyHash {
  size_t operator()(const UnitKey& k) const {
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ULL));
  }
};

// Appends [begin, end) to `ranges`, merging with the last range if adjacent.
void append_range(std::vector<RowRange>& ranges, int64_t begin, int64_t end) {
  if (!ranges.empty() && ranges.back().end == begin) {
    ranges.back().end = end;
  } else {
    ranges.push_back({begin, end});
  }
}

// The distinct grid: distinct units in first-use order, consecutive frames
// of one media item in one row.
void build_grid(const FrameSet& fs, FrameDedup& d) {
  const FrameUnit* prev = nullptr;
  for (int64_t first : d.first_use) {
    const FrameUnit& u = fs.units[static_cast<size_t>(first)];
    if (prev != nullptr && prev->media == u.media &&
        prev->frame + 1 == u.frame) {
      d.grid.back().t += 1;
    } else {
      d.grid.push_back({1, u.h, u.w});
    }
    append_range(d.pixel_rows, u.pixel_offset, u.pixel_offset + u.patch_rows);
    d.source_pixel_offset.push_back(u.pixel_offset);
    d.distinct_patch_rows += u.patch_rows;
    d.distinct_tokens += u.tokens;
    prev = &u;
  }
}

void check_same_shape(
    const FrameSet& fs, int64_t a, int64_t b, const UnitKey& key) {
  const FrameUnit& ua = fs.units[static_cast<size_t>(a)];
  const FrameUnit& ub = fs.units[static_cast<size_t>(b)];
  FRAMESHARD_CHECK(
      ua.h == ub.h && ua.w == ub.w,
      "dedup_frames",
      "expected frame units with equal keys to have equal shapes, got unit ",
      a,
      " (media ",
      ua.media,
      ", frame ",
      ua.frame,
      ", h x w ",
      ua.h,
      " x ",
      ua.w,
      ") and unit ",
      b,
      " (media ",
      ub.media,
      ", frame ",
      ub.frame,
      ", h x w ",
      ub.h,
      " x ",
      ub.w,
      ") with key ",
      fingerprint_hex(key.hi),
      fingerprint_hex(key.lo).substr(2));
}

}  // namespace

FrameDedup dedup_frames(
    const std::vector<GridThw>& grid,
    const std::vector<UnitKey>& unit_keys,
    const MediaLayout& layout) {
  const FrameSet fs = expand_frames(grid, layout);
  FRAMESHARD_CHECK(
      unit_keys.size() == fs.units.size(),
      "dedup_frames",
      "expected one key per frame unit (",
      fs.units.size(),
      "), got ",
      unit_keys.size());
  FrameDedup d;
  d.units = static_cast<int64_t>(fs.units.size());
  d.patch_rows = fs.total_patch_rows;
  d.tokens = fs.total_tokens;
  d.unit_source.resize(fs.units.size());
  std::unordered_map<UnitKey, int64_t, KeyHash> seen;
  seen.reserve(fs.units.size());
  internal::Fingerprint fp;
  for (int64_t u = 0; u < d.units; ++u) {
    const UnitKey& key = unit_keys[static_cast<size_t>(u)];
    const auto [it, inserted] =
        seen.emplace(key, static_cast<int64_t>(d.first_use.size()));
    if (inserted) {
      d.first_use.push_back(u);
    } else {
      check_same_shape(
          fs, d.first_use[static_cast<size_t>(it->second)], u, key);
    }
    d.unit_source[static_cast<size_t>(u)] = it->second;
    fp.add(it->second);
  }
  d.distinct_units = static_cast<int64_t>(d.first_use.size());
  d.fingerprint = fp.finish();
  build_grid(fs, d);
  if (d.identity()) {
    return d;
  }
  // Token offsets of the distinct units, then each use token's source.
  std::vector<int64_t> distinct_offset(d.first_use.size());
  int64_t offset = 0;
  for (size_t k = 0; k < d.first_use.size(); ++k) {
    distinct_offset[k] = offset;
    offset += fs.units[static_cast<size_t>(d.first_use[k])].tokens;
  }
  d.token_source.reserve(static_cast<size_t>(d.tokens));
  for (int64_t u = 0; u < d.units; ++u) {
    const int64_t base = distinct_offset[static_cast<size_t>(
        d.unit_source[static_cast<size_t>(u)])];
    for (int64_t t = 0; t < fs.units[static_cast<size_t>(u)].tokens; ++t) {
      d.token_source.push_back(base + t);
    }
  }
  return d;
}

std::vector<RowRange> source_rows(
    const FrameDedup& dedup, const FrameSet& distinct, const RowRange& range) {
  std::vector<RowRange> out;
  if (dedup.identity()) {
    if (range.size() > 0) {
      out.push_back(range);
    }
    return out;
  }
  // The distinct unit holding range.begin, then unit by unit.
  auto it = std::upper_bound(
      distinct.units.begin(),
      distinct.units.end(),
      range.begin,
      [](int64_t row, const FrameUnit& u) { return row < u.pixel_offset; });
  size_t k = static_cast<size_t>(it - distinct.units.begin()) - 1;
  int64_t begin = range.begin;
  while (begin < range.end) {
    const FrameUnit& u = distinct.units[k];
    const int64_t end = std::min(range.end, u.pixel_offset + u.patch_rows);
    const int64_t source = dedup.source_pixel_offset[k] - u.pixel_offset;
    append_range(out, begin + source, end + source);
    begin = end;
    ++k;
  }
  return out;
}

std::vector<UnitKey> media_unit_keys(
    const std::vector<GridThw>& grid,
    const std::vector<UnitKey>& media_keys,
    const MediaLayout& layout) {
  FRAMESHARD_CHECK(
      media_keys.size() == grid.size(),
      "media_unit_keys",
      "expected one media key per grid_thw row (",
      grid.size(),
      "), got ",
      media_keys.size());
  const FrameSet fs = expand_frames(grid, layout);
  std::vector<UnitKey> keys;
  keys.reserve(fs.units.size());
  for (const FrameUnit& u : fs.units) {
    const UnitKey& m = media_keys[static_cast<size_t>(u.media)];
    const uint64_t f = static_cast<uint64_t>(u.frame);
    keys.push_back({mix64(m.hi ^ mix64(f + 1)), mix64(m.lo + f)});
  }
  return keys;
}

namespace {

void check_consumers(const ShardPlan& plan, const UseConsumers& uses) {
  const char* fn = "route_uses";
  const int64_t world = plan.options.world;
  FRAMESHARD_CHECK(
      plan.sharded(),
      fn,
      "expected a sharded plan, got the replicated path (",
      plan.reason,
      ")");
  FRAMESHARD_CHECK(
      uses.first.size() == uses.source.size() &&
          uses.last.size() == uses.source.size(),
      fn,
      "expected source, first and last of one size, got ",
      uses.source.size(),
      ", ",
      uses.first.size(),
      " and ",
      uses.last.size());
  for (size_t u = 0; u < uses.source.size(); ++u) {
    FRAMESHARD_CHECK(
        uses.source[u] >= 0 && uses.source[u] < plan.frames.total_tokens,
        fn,
        "expected use sources in [0, ",
        plan.frames.total_tokens,
        "), got ",
        uses.source[u]);
    FRAMESHARD_CHECK(
        uses.first[u] >= 0 && uses.first[u] < uses.last[u] &&
            uses.last[u] <= world,
        fn,
        "expected consumer ranks within [0, ",
        world,
        "), got [",
        uses.first[u],
        ", ",
        uses.last[u],
        ")");
  }
}

}  // namespace

OwnerRoute route_uses(
    const ShardPlan& plan, const UseConsumers& uses, int64_t rank) {
  check_consumers(plan, uses);
  const int64_t world = plan.options.world;
  const size_t distinct = static_cast<size_t>(plan.frames.total_tokens);
  // consumes[d * world + r]: rank r consumes a use of distinct token d.
  std::vector<char> consumes(distinct * static_cast<size_t>(world), 0);
  for (size_t u = 0; u < uses.source.size(); ++u) {
    char* row = consumes.data() + uses.source[u] * world;
    std::fill(row + uses.first[u], row + uses.last[u], char{1});
  }
  OwnerRoute r;
  r.send_counts.assign(static_cast<size_t>(world), 0);
  r.recv_counts.assign(static_cast<size_t>(world), 0);
  const std::vector<int64_t> mine = encoded_tokens(plan, rank);
  for (int64_t dest = 0; dest < world; ++dest) {
    for (size_t i = 0; i < mine.size(); ++i) {
      if (consumes[static_cast<size_t>(mine[i] * world + dest)] != 0) {
        r.send_order.push_back(static_cast<int64_t>(i));
        ++r.send_counts[static_cast<size_t>(dest)];
      }
    }
  }
  // Where each distinct row this rank consumes lands in the received rows.
  std::vector<int64_t> position(distinct, -1);
  int64_t received = 0;
  for (int64_t s = 0; s < world; ++s) {
    for (int64_t t : encoded_tokens(plan, s)) {
      if (consumes[static_cast<size_t>(t * world + rank)] != 0) {
        position[static_cast<size_t>(t)] = received++;
        ++r.recv_counts[static_cast<size_t>(s)];
      }
    }
  }
  for (size_t u = 0; u < uses.source.size(); ++u) {
    if (rank >= uses.first[u] && rank < uses.last[u]) {
      r.recv_order.push_back(position[static_cast<size_t>(uses.source[u])]);
      r.tokens.push_back(static_cast<int64_t>(u));
    }
  }
  return r;
}

}  // namespace frameshard
