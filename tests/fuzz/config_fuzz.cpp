// Fuzz target: the YAML config (frameshard::parse_config). Every input must
// parse or raise frameshard::Error (any other exception, a crash, a hang or
// UB is a finding); what parses must round-trip through to_yaml unchanged.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build, see tests/fuzz/CMakeLists.txt):
//   build-fuzz/tests/fuzz/config_fuzz tests/fuzz/corpus/config
//   -max_total_time=30
#include <frameshard/config.h>
#include <frameshard/error.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  frameshard::Config config;
  try {
    config = frameshard::parse_config(text, "fuzz.yaml");
  } catch (const frameshard::Error&) {
    return 0;
  }
  // What parses is valid, so its rendering parses to the same config.
  const std::string yaml = frameshard::to_yaml(config);
  if (frameshard::to_yaml(frameshard::parse_config(yaml, "again")) != yaml) {
    std::abort();
  }
  return 0;
}
