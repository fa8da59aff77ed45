// File: frameshard/error.h
//
// Errors raised by the torch-free planning core. Caller mistakes throw
// frameshard::Error (a std::invalid_argument), whose message has the form
//
//   frameshard::<function>: expected <X>, got <Y>
//
// The runtime (LibTorch) raises c10::Error through TORCH_CHECK instead, with
// the rank in the prefix: "frameshard::<function>: [rank r/W] ...".
//
// Usage:
//   FRAMESHARD_CHECK(h % merge == 0, "expand_frames",
//                    "grid_thw[", i, "].h divisible by spatial_merge_size ",
//                    merge, ", got ", h);
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace frameshard {

/// A caller mistake detected by the planning core (bad grid, bad config...).
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
template <typename... Args>
[[noreturn]] void fail(const char* fn, const Args&... args) {
  std::ostringstream os;
  os << "frameshard::" << fn << ": ";
  append_all(os, args...);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace frameshard

/// Throws frameshard::Error("frameshard::<fn>: <message...>") unless `cond`.
#define FRAMESHARD_CHECK(cond, fn, ...)            \
  do {                                             \
    if (!(cond)) {                                 \
      ::frameshard::detail::fail(fn, __VA_ARGS__); \
    }                                              \
  } while (false)
