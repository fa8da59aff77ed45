// Quantities as the planners' reasons print them (units_text.h).
#include "core/units_text.h"

#include <cstdio>

namespace frameshard {
namespace internal {

std::string milliseconds_text(double seconds) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.3g ms", seconds * 1e3);
  return buf;
}

}  // namespace internal
}  // namespace frameshard
