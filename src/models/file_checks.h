// !!! Internal header of frameshard::models, not installed. !!!
// File checks shared by the checkpoint readers (safetensors_*.cpp,
// hf_config.cpp): one wording for "not a file" errors.
#pragma once

#include <cstdint>
#include <string>

namespace frameshard {
namespace models {
namespace detail {

/// Throws "frameshard::<fn>: expected a readable file at <path>, got ..."
/// unless `path` is a regular file.
void check_regular_file(const std::string& path, const char* fn);

/// check_regular_file, then the file's size in bytes (raising as `fn` if
/// it cannot be read).
int64_t regular_file_size(const std::string& path, const char* fn);

}  // namespace detail
}  // namespace models
}  // namespace frameshard
