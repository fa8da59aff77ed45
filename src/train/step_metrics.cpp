// Every rank's metrics of one step, gathered over the world (trainer.h).
#include <frameshard/train/trainer.h>

#include "train/gather_doubles.h"

#include <vector>

namespace frameshard {
namespace train {

std::vector<StepMetrics> gather_step_metrics(
    const StepMetrics& mine, const TrainGroups& groups) {
  // One fixed-size record of doubles per rank (counts below 2^53 are
  // exact); the plan path as 0/1, the mesh mode as 0 (none) / 1 / 2. The
  // cost model's texts are not sent: within a CP group (the world over the
  // mesh) they are the same on every rank (train/online_step.h), so each
  // entry takes this rank's.
  const std::vector<double> rec = {
      static_cast<double>(mine.step),
      mine.loss,
      mine.step_seconds,
      mine.vision_seconds,
      mine.gather_seconds,
      mine.decoder_seconds,
      static_cast<double>(mine.peak_bytes),
      static_cast<double>(mine.vision_peak_bytes),
      static_cast<double>(mine.tower_rows),
      mine.plan_path == "sharded" ? 1.0 : 0.0,
      static_cast<double>(mine.visual_bytes_received),
      static_cast<double>(mine.allgather_bytes_received),
      mine.vision_cpu_seconds,
      mine.hash_seconds,
      static_cast<double>(mine.frames_total),
      static_cast<double>(mine.frames_distinct),
      static_cast<double>(mine.rows_total),
      static_cast<double>(mine.rows_distinct),
      mine.mesh_mode == "mesh"      ? 1.0
      : mine.mesh_mode == "cp-only" ? 2.0
                                    : 0.0,
      mine.mesh_gain,
      mine.predicted_slowest_seconds,
      mine.measured_slowest_seconds,
      mine.cost_switched ? 1.0 : 0.0};
  const std::vector<double> all = detail::all_gather_doubles(rec, groups.world);
  std::vector<StepMetrics> result;
  for (size_t offset = 0; offset < all.size(); offset += rec.size()) {
    const double* v = all.data() + offset;
    StepMetrics m;
    m.step = static_cast<int64_t>(v[0]);
    m.loss = v[1];
    m.step_seconds = v[2];
    m.vision_seconds = v[3];
    m.gather_seconds = v[4];
    m.decoder_seconds = v[5];
    m.peak_bytes = static_cast<int64_t>(v[6]);
    m.vision_peak_bytes = static_cast<int64_t>(v[7]);
    m.tower_rows = static_cast<int64_t>(v[8]);
    m.plan_path = v[9] > 0.5 ? "sharded" : "replicated";
    m.visual_bytes_received = static_cast<int64_t>(v[10]);
    m.allgather_bytes_received = static_cast<int64_t>(v[11]);
    m.vision_cpu_seconds = v[12];
    m.hash_seconds = v[13];
    m.frames_total = static_cast<int64_t>(v[14]);
    m.frames_distinct = static_cast<int64_t>(v[15]);
    m.rows_total = static_cast<int64_t>(v[16]);
    m.rows_distinct = static_cast<int64_t>(v[17]);
    m.mesh_mode = v[18] > 1.5 ? "cp-only" : v[18] > 0.5 ? "mesh" : "";
    m.mesh_gain = v[19];
    m.predicted_slowest_seconds = v[20];
    m.measured_slowest_seconds = v[21];
    m.cost_switched = v[22] > 0.5;
    m.cost_model = mine.cost_model;
    m.cost_update = mine.cost_update;
    m.cost_model_next = mine.cost_model_next;
    result.push_back(m);
  }
  return result;
}

}  // namespace train
}  // namespace frameshard
