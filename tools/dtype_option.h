// The one `--dtype` parser of the command-line tool: every command names the
// dtypes it accepts, in the order its error message lists them.
//
// Usage:
//   at::ScalarType t = parse_dtype_option(
//       a.dtype, "verify", {at::kDouble, at::kFloat, at::kBFloat16});
//   // "bfloat8" -> frameshard::Error "frameshard::verify: expected --dtype
//   //   float64, float32 or bfloat16, got \"bfloat8\""
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// "float64", "float32", "bfloat16" or "float16".
std::string dtype_option_name(at::ScalarType dtype);

/// The dtype named `name` if it is one of `allowed`; otherwise throws
/// frameshard::Error naming `command` and listing `allowed`.
at::ScalarType parse_dtype_option(
    const std::string& name,
    const char* command,
    const std::vector<at::ScalarType>& allowed);

}  // namespace cli
}  // namespace frameshard
