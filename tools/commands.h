// Subcommands of the frameshard command-line tool. Each file registers one.
// A command that must exit non-zero (e.g. verify over tolerance) throws
// CLI::RuntimeError(code); bad input throws frameshard::Error / c10::Error,
// which main() prints as "error: <message>" with exit code 2.
#pragma once

#include <CLI/CLI.hpp>

namespace frameshard {
namespace cli {

/// `frameshard plan`: plan a workload and compare partitioners.
void register_plan_command(CLI::App& app);
/// `frameshard verify`: sharded vs replicated parity over local ranks.
void register_verify_command(CLI::App& app);
/// `frameshard encode`: a Hugging Face Qwen-VL vision tower on pixel rows.
void register_encode_command(CLI::App& app);
/// `frameshard train` and `frameshard ab`: CP training of a small VLM.
void register_train_commands(CLI::App& app);
/// `frameshard analyze`: what sharding would do on a dataset manifest.
void register_analyze_command(CLI::App& app);
/// `frameshard calibrate`: fit the cost model to the timed tower.
void register_calibrate_command(CLI::App& app);

}  // namespace cli
}  // namespace frameshard
