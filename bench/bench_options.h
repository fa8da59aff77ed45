// Options the timing programs share (frameshard_tower_bench,
// frameshard_vision_ab, frameshard_scale_sim): device, dtype, repeats, warm-up
// runs, and parsing that
// prints --help or the error and exits (0 or 2).
//
// Usage:
//   TimingOptions t{"bfloat16"};
//   CLI::App app{"..."};
//   add_timing_options(app, t);
//   parse_or_exit(app, argc, argv);
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace frameshard {
namespace bench {

struct TimingOptions {
  std::string dtype = "float32";  // float32 | bfloat16
  int repeats = 3;                // timed runs (the median is reported)
  int warmup = 1;                 // untimed runs first
  std::string device = "cpu";     // cpu | cuda
};

/// --device, --dtype, --repeats, --warmup, validated.
void add_timing_options(CLI::App& app, TimingOptions& options);

/// app.parse; on --help prints it and exits 0, on an error prints it and
/// exits 2.
void parse_or_exit(CLI::App& app, int argc, char** argv);

}  // namespace bench
}  // namespace frameshard
