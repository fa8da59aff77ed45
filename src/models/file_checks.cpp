#include "models/file_checks.h"

#include "tower/check.h"

#include <filesystem>

namespace frameshard {
namespace models {
namespace detail {

void check_regular_file(const std::string& path, const char* fn) {
  namespace fs = std::filesystem;
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

}  // namespace detail
}  // namespace models
}  // namespace frameshard
