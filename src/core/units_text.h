// File: core/units_text.h
//
// !!! Internal header of frameshard::core, not installed. !!!
//
// Quantities as the planners' reasons print them, so that the policy's and
// the mesh choice's one-line reasons read alike.
//
// Usage:
//   internal::milliseconds_text(0.0012);  // "1.2 ms"
#pragma once

#include <string>

namespace frameshard {
namespace internal {

/// Seconds as milliseconds with 3 significant digits: "1.2 ms".
std::string milliseconds_text(double seconds);

}  // namespace internal
}  // namespace frameshard
