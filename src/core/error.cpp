// The one place the "frameshard::<fn>: [rank r/W] " error prefix is spelled.

#include <frameshard/error.h>

namespace frameshard {
namespace detail {

std::string error_prefix(const char* fn) {
  return std::string("frameshard::") + fn + ": ";
}

std::string error_prefix(const char* fn, int64_t rank, int64_t world) {
  return error_prefix(fn) + "[rank " + std::to_string(rank) + "/" +
         std::to_string(world) + "] ";
}

std::string excerpt(const std::string& text) {
  if (text.size() <= kMaxExcerptChars) {
    return text;
  }
  return text.substr(0, kMaxExcerptChars) + "... (" +
         std::to_string(text.size()) + " characters)";
}

}  // namespace detail
}  // namespace frameshard
