// File checks shared by the checkpoint readers (safetensors.cpp,
// hf_loader.cpp): one wording for "not a file" errors.
#pragma once

#include <c10/util/Exception.h>

#include <filesystem>
#include <string>

namespace frameshard {
namespace models {
namespace detail {

/// Throws "frameshard::<fn>: expected a readable file at <path>, got ..."
/// unless `path` is a regular file.
inline void check_regular_file(const std::string& path, const char* fn) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TORCH_CHECK(
      fs::is_regular_file(path, ec),
      "frameshard::",
      fn,
      ": expected a readable file at ",
      path,
      ", got ",
      fs::exists(path, ec) ? "something that is not a regular file"
                           : "no such file");
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
