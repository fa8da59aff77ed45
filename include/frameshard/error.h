// File: frameshard/error.h
//
// One wording for every error frameshard raises:
//
//   frameshard::<function>: expected <X>, got <Y>
//   frameshard::<function>: [rank r/W] expected <X>, got <Y>   (collectives)
//
// The torch-free planning core throws frameshard::Error (a
// std::invalid_argument) through FRAMESHARD_CHECK. The LibTorch layers
// (tower contract, models, runtime) raise c10::Error through TORCH_CHECK with
// the same prefix, built by error_prefix() (their private macro
// FRAMESHARD_TORCH_CHECK in src/tower/check.h). Nothing else spells
// "frameshard::" by hand.
//
// Usage:
//   FRAMESHARD_CHECK(h % merge == 0, "expand_frames",
//                    "grid_thw[", i, "].h divisible by spatial_merge_size ",
//                    merge, ", got ", h);
//   std::string p = frameshard::detail::error_prefix("encode", 1, 4);
//   // "frameshard::encode: [rank 1/4] "
#pragma once

#include <cstddef>
#include <cstdint>
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

/// "frameshard::<fn>: ".
std::string error_prefix(const char* fn);
/// "frameshard::<fn>: [rank <rank>/<world>] ".
std::string error_prefix(const char* fn, int64_t rank, int64_t world);

inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}

/// Longest rendering of a user value in an error (longer ones are cut by
/// excerpt()), so a 1 MB key or value never makes a 1 MB message.
constexpr std::size_t kMaxExcerptChars = 200;

/// `text` itself when at most kMaxExcerptChars long, else its first
/// kMaxExcerptChars characters and "... (<n> characters)".
std::string excerpt(const std::string& text);

/// error_prefix(fn) followed by every argument streamed in order.
template <typename... Args>
std::string error_message(const char* fn, const Args&... args) {
  std::ostringstream os;
  os << error_prefix(fn);
  append_all(os, args...);
  return os.str();
}

/// Throws frameshard::Error(error_message(fn, args...)).
template <typename... Args>
[[noreturn]] void fail(const char* fn, const Args&... args) {
  throw Error(error_message(fn, args...));
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
