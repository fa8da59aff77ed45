// The mesh mode of the scale simulation (bench/scale_sim.cpp, --mesh-dp):
// dp data-parallel replicas, each with its own batch of real manifest
// samples (examples/manifests/), under the CP-only plan (mesh_dims [cp]:
// each replica's frames over its own cp ranks) and the mesh plan
// (mesh_dims [dp, cp]: every replica's frames over all dp * cp ranks,
// frameshard/mesh_plan.h). Every rank's share is timed one after another
// in this process (tools/tower_timing.h) and the step-level vision
// bottleneck -- the slowest rank of the whole job, since every replica
// waits for it in the gradient all-reduce -- is reported for both, with
// the transfers modelled at a bandwidth (CP-only: the gather into each
// rank; mesh: the pixels and outputs each rank receives). With
// --split-frames both plans may cut frames; with --auto the mesh arm runs
// policy auto's per-step choice, and the table says which plan each step
// took and the predicted ratio it was chosen by.
#pragma once

#include <frameshard/mesh_plan.h>
#include <frameshard/models/qwen_factory.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace bench {

struct MeshSimArgs {
  std::vector<std::string> manifests;
  std::string family = "qwen3-vl";  // the processor rule of the manifests
  int64_t dp = 8;
  int64_t cp = 8;
  int64_t samples_per_replica = 2;  // consecutive manifest samples
  int64_t steps = 3;
  int64_t scale = 4;  // h and w divided by this (a CPU runs the tower)
  double bandwidth_gbps = 25.0;
  int repeats = 1;
  bool cpu_clock = true;  // process CPU time; false: wall (a GPU)
  /// Split frames (within a replica under [cp], across replicas on the
  /// mesh) and the per-step choice of policy auto (mesh_plan.h).
  bool split = false;
  bool choose = false;
  double min_gain = kDefaultMeshMinGain;
  /// frame_sharding.cost_alpha of both plans (e.g. a `frameshard
  /// calibrate` file of this tower, so that the choice weighs this CPU's
  /// seconds); empty: the FLOP model at 100 TFLOP/s.
  std::string cost_alpha;
};

/// Prints one table per manifest (see the banner). Single-threaded.
void simulate_mesh(const MeshSimArgs& a, const models::QwenVisionModel& m);

}  // namespace bench
}  // namespace frameshard
