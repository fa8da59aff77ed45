// Fuzz target: dotted overrides (frameshard::apply_override), the
// `--set key=value` path of the command line. The input is "<key>=<value>"
// (split at the first '='; no '=' means an empty value). Every input must
// apply or raise frameshard::Error; a failed override leaves the config valid
// and an applied one keeps it round-tripping through to_yaml.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build):
//   build-fuzz/tests/fuzz/override_fuzz tests/fuzz/corpus/override
//   -max_total_time=30
#include <frameshard/config.h>
#include <frameshard/error.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t eq = text.find('=');
  const std::string key = text.substr(0, eq);
  const std::string value =
      eq == std::string::npos ? std::string() : text.substr(eq + 1);
  frameshard::Config config;
  try {
    frameshard::apply_override(config, key, value);
  } catch (const frameshard::Error&) {
  }
  // Applied or not, the config is one validate() accepts and to_yaml
  // renders into a document parse_config reads back equal.
  frameshard::validate(config);
  const std::string yaml = frameshard::to_yaml(config);
  if (frameshard::to_yaml(frameshard::parse_config(yaml, "again")) != yaml) {
    std::abort();
  }
  return 0;
}
