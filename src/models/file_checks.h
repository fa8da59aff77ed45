// !!! Internal header of frameshard::models, not installed. !!!
// File checks shared by the checkpoint readers (safetensors.cpp,
// hf_loader.cpp): one wording for "not a file" errors.
#pragma once

#include <string>

namespace frameshard {
namespace models {
namespace detail {

/// Throws "frameshard::<fn>: expected a readable file at <path>, got ..."
/// unless `path` is a regular file.
void check_regular_file(const std::string& path, const char* fn);

}  // namespace detail
}  // namespace models
}  // namespace frameshard
