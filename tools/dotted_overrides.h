// The `--dotted.key value` / `--dotted.key=value` arguments CLI11 leaves
// over (allow_extras), shared by `plan` and `train`/`ab`: each pair is
// handed to `apply` (the config's own override, which validates it).
// `command` names the command in errors; `example` is a key the error
// suggests.
#pragma once

#include <frameshard/config.h>

#include <functional>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// Returns the keys applied, in order. frameshard::Error for an argument
/// that is not `--a.b value` or `--a.b=value`.
std::vector<std::string> apply_dotted_overrides(
    const std::vector<std::string>& extras,
    const std::function<void(const std::string&, const std::string&)>& apply,
    const char* command,
    const std::string& example);

/// The config of a command that runs frames (`encode`, `verify`): library
/// defaults < --config FILE (when not empty) < the dotted overrides in
/// `extras`. The parent forwards both to its rank processes.
Config command_config(
    const std::string& config_file,
    const std::vector<std::string>& extras,
    const char* command);

}  // namespace cli
}  // namespace frameshard
