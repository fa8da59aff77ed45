#include <frameshard/splitmix64.h>

#include <limits>

namespace frameshard {

uint64_t SplitMix64::below(uint64_t n) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                         std::numeric_limits<uint64_t>::max() % n;
  uint64_t x = next();
  while (x >= limit) {
    x = next();
  }
  return x % n;
}

int64_t SplitMix64::uniform(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
}

double SplitMix64::unit() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

}  // namespace frameshard
