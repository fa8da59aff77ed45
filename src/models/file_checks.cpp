#include "models/file_checks.h"

#include "tower/check.h"

#include <filesystem>

namespace frameshard {
namespace models {
namespace detail {

namespace fs = std::filesystem;

void check_regular_file(const std::string& path, const char* fn) {
  std::error_code ec;
  FRAMESHARD_TORCH_CHECK(
      fs::is_regular_file(path, ec),
      fn,
      "expected a readable file at ",
      path,
      ", got ",
      fs::exists(path, ec) ? "something that is not a regular file"
                           : "no such file");
}

int64_t regular_file_size(const std::string& path, const char* fn) {
  check_regular_file(path, fn);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  FRAMESHARD_TORCH_CHECK(
      !ec, fn, "cannot read the size of ", path, ": ", ec.message());
  return static_cast<int64_t>(size);
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
