// Dotted config overrides from the command line (dotted_overrides.h).
#include "dotted_overrides.h"

#include <frameshard/error.h>

namespace frameshard {
namespace cli {

std::vector<std::string> apply_dotted_overrides(
    const std::vector<std::string>& extras,
    const std::function<void(const std::string&, const std::string&)>& apply,
    const char* command,
    const std::string& example) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    FRAMESHARD_CHECK(
        arg.size() > 2 && arg.compare(0, 2, "--") == 0,
        command,
        "expected an option or a dotted config override such as --",
        example,
        ", got ",
        arg);
    std::string key = arg.substr(2);
    std::string value;
    const std::size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      FRAMESHARD_CHECK(
          i + 1 < extras.size(),
          command,
          "expected a value after ",
          arg,
          ", got nothing");
      value = extras[++i];
    }
    FRAMESHARD_CHECK(
        key.find('.') != std::string::npos,
        command,
        "expected an option of ",
        command,
        " or a dotted config key such as --",
        example,
        ", got unknown option ",
        arg);
    apply(key, value);
    keys.push_back(key);
  }
  return keys;
}

Config command_config(
    const std::string& config_file,
    const std::vector<std::string>& extras,
    const char* command) {
  Config config = config_file.empty() ? Config{} : load_config(config_file);
  apply_dotted_overrides(
      extras,
      [&config](const std::string& k, const std::string& v) {
        apply_override(config, k, v);
      },
      command,
      std::string(kFrameShardingPath) + ".split_frames true");
  return config;
}

}  // namespace cli
}  // namespace frameshard
