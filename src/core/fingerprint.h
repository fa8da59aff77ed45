// File: core/fingerprint.h
//
// !!! Internal header of frameshard::core, not installed. Header-only: the
// hash runs per frame unit inside make_plan and must inline. !!!
//
// A streaming 64-bit hash over a sequence of int64 words: XXH64 (seed 0) of
// the words' little-endian bytes, computed word by word so the result is the
// same on every platform and compiler. XXH64 runs four independent lanes,
// several times faster than a byte-wise FNV-1a on the ~5 words per frame unit
// a plan fingerprint covers.
//
// Usage:
//   frameshard::internal::Fingerprint fp;
//   fp.add(world);
//   fp.add(static_cast<int64_t>(units.size()));
//   uint64_t h = fp.finish();
#pragma once

#include <cstdint>

namespace frameshard {
namespace internal {

class Fingerprint {
 public:
  void add(int64_t value) {
    buf_[nbuf_++] = static_cast<uint64_t>(value);
    if (nbuf_ == 4) {
      v1_ = round(v1_, buf_[0]);
      v2_ = round(v2_, buf_[1]);
      v3_ = round(v3_, buf_[2]);
      v4_ = round(v4_, buf_[3]);
      nbuf_ = 0;
      stripes_ += 1;
    }
  }

  uint64_t finish() const {
    uint64_t h = 0;
    if (stripes_ > 0) {
      h = rotl(v1_, 1) + rotl(v2_, 7) + rotl(v3_, 12) + rotl(v4_, 18);
      h = merge(h, v1_);
      h = merge(h, v2_);
      h = merge(h, v3_);
      h = merge(h, v4_);
    } else {
      h = kP5;  // seed 0
    }
    h += (stripes_ * 4 + static_cast<uint64_t>(nbuf_)) * 8;  // length in bytes
    for (int i = 0; i < nbuf_; ++i) {
      h ^= round(0, buf_[i]);
      h = rotl(h, 27) * kP1 + kP4;
    }
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
  static constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
  static constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
  static constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
  static constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

  static uint64_t rotl(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
  }
  static uint64_t round(uint64_t acc, uint64_t input) {
    acc += input * kP2;
    acc = rotl(acc, 31);
    return acc * kP1;
  }
  static uint64_t merge(uint64_t acc, uint64_t val) {
    acc ^= round(0, val);
    return acc * kP1 + kP4;
  }

  uint64_t v1_ = kP1 + kP2;  // seed 0
  uint64_t v2_ = kP2;
  uint64_t v3_ = 0;
  uint64_t v4_ = 0 - kP1;
  uint64_t buf_[4] = {0, 0, 0, 0};
  int nbuf_ = 0;
  uint64_t stripes_ = 0;
};

}  // namespace internal
}  // namespace frameshard
