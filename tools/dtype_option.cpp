#include "dtype_option.h"

#include <frameshard/error.h>

#include <sstream>

namespace frameshard {
namespace cli {

std::string dtype_option_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return "float64";
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return c10::toString(dtype);
  }
}

at::ScalarType parse_dtype_option(
    const std::string& name,
    const char* command,
    const std::vector<at::ScalarType>& allowed) {
  std::ostringstream list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (dtype_option_name(allowed[i]) == name) {
      return allowed[i];
    }
    list << (i == 0                    ? ""
             : i + 1 == allowed.size() ? " or "
                                       : ", ")
         << dtype_option_name(allowed[i]);
  }
  detail::fail(
      command, "expected --dtype ", list.str(), ", got \"", name, "\"");
}

}  // namespace cli
}  // namespace frameshard
