#include "bench_options.h"

#include <cstdlib>

namespace frameshard {
namespace bench {

void add_timing_options(CLI::App& app, TimingOptions& options) {
  app.add_option("--device", options.device)
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--dtype", options.dtype)
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  app.add_option("--repeats", options.repeats)->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup)->check(CLI::NonNegativeNumber);
}

void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
}

}  // namespace bench
}  // namespace frameshard
