// File: tests/testing/rng.h
//
// A small seeded PRNG (splitmix64) for randomized tests: the same cases on
// every platform and standard library, unlike std::uniform_int_distribution.
//
// Usage:
//   frameshard::testing::Rng rng{7};
//   int64_t k = rng.uniform(1, 10);  // inclusive
//   double u = rng.unit();           // [0, 1)
#pragma once

#include <cstdint>

namespace frameshard {
namespace testing {

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo +
           static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double unit() {  // 53 random bits in [0, 1)
    return static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
};

}  // namespace testing
}  // namespace frameshard
