// How `frameshard train` / `frameshard ab` get their ranks: the process
// groups of one rank from a FileStore (the local workers the command
// spawns) or from a launcher's environment (torchrun --no-python, srun,
// mpirun: frameshard/runtime/process_group.h, read_launch_env), and the
// arms run on them, with rank 0 printing.
#pragma once

#include "train_report.h"

#include <frameshard/train/train_config.h>

#include <string>
#include <vector>

namespace frameshard {
namespace cli {

struct TrainRun {
  train::TrainConfig config;
  bool ab = false;               // both arms (replicated, then sharded)
  bool json = false;             // rank 0 prints one JSON object instead
  std::string plot;              // ab: the SVG written by rank 0 ("" = none)
  std::string backend = "auto";  // gloo | nccl | auto
  int local_world = 1;           // ranks on this node (threads per rank)
  // --write-cost: rank 0 writes the sharded arm's online fit here at the
  // end (online_report.h); "" = none.
  std::string write_cost;
};

/// Runs one rank: `store_path` non-empty = a spawned local worker of
/// `world` ranks with rank `rank`; else the launcher's environment.
/// Returns the exit code (0; 1 when ab's losses differ beyond 1e-5 in
/// float32 / 1e-9 in float64).
int run_train_rank(
    const TrainRun& run, const std::string& store_path, int rank, int world);

}  // namespace cli
}  // namespace frameshard
