// File: frameshard/splitmix64.h
//
// A small seeded PRNG (SplitMix64) that draws the same numbers on every
// platform and standard library, unlike std::uniform_int_distribution: the
// workload presets (`--preset mixed --seed 3` is the same batch everywhere),
// the randomized tests and the benchmarks all draw from it.
//
// mix64 is its finaliser alone, a bijective 64-bit mix (the hashes of
// dedup keys use it).
//
// Usage:
//   frameshard::SplitMix64 rng(7);
//   int64_t k = rng.uniform(1, 10);  // inclusive, unbiased
//   double u = rng.unit();           // [0, 1)
#pragma once

#include <cstdint>

namespace frameshard {

/// SplitMix64's finaliser: a bijective mix of all 64 bits.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    return mix64(state_ += 0x9e3779b97f4a7c15ULL);
  }
  /// Uniform in [0, n) (n >= 1); rejection keeps it unbiased.
  uint64_t below(uint64_t n);
  /// Uniform in [lo, hi] (lo <= hi).
  int64_t uniform(int64_t lo, int64_t hi);
  /// 53 random bits in [0, 1).
  double unit();

 private:
  uint64_t state_;
};

}  // namespace frameshard
