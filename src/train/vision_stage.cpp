// The vision stage of a training step: encode with a timed tower, backward
// in two phases (see vision_stage.h).
#include "train/vision_stage.h"

#include <frameshard/online_cost.h>
#include <frameshard/runtime/frame_keys.h>
#include <frameshard/runtime/gather.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <utility>

namespace frameshard {
namespace train {
namespace detail {

using Clock = std::chrono::steady_clock;

double elapsed_seconds(Clock::time_point start, c10::Device device) {
  if (device.is_cuda()) {
    c10::impl::VirtualGuardImpl impl(device.type());
    impl.synchronizeDevice(device.index());
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

VisionStage::VisionStage(
    VisionTower tower,
    bool checkpointing,
    MemoryStats* memory,
    bool dedup,
    MediaLayout layout)
    : tower_(std::move(tower)),
      checkpointing_(checkpointing),
      memory_(memory),
      dedup_(dedup),
      layout_(layout) {}

std::vector<at::Tensor> VisionStage::run_tower(const TowerInput& input) {
  const auto device = input.pixel_values.device();
  const int64_t base = memory_->current_bytes();
  // The tower's own window; the step's peak so far is kept aside.
  peak_before_tower_ = std::max(peak_before_tower_, memory_->peak_bytes());
  memory_->reset_peak();
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  {
    // Under checkpointing the forward keeps no activations; backward_tower
    // recomputes them.
    torch::autograd::GradMode::set_enabled(!checkpointing_);
    struct Restore {
      ~Restore() {
        torch::autograd::GradMode::set_enabled(true);
      }
    } restore;
    tower_out_ = tower_(input);
  }
  tower_seconds_ += elapsed_seconds(start, device);
  tower_cpu_seconds_ += thread_cpu_seconds() - cpu_start;
  tower_peak_bytes_ = std::max<int64_t>(0, memory_->peak_bytes() - base);
  input_ = input;
  tower_rows_ = input.pixel_values.size(0);
  tower_cu_seqlens_ = input.cu_seqlens;
  tower_grid_ = input.grid_thw;
  tower_pieces_ = input.pieces;
  tower_leaf_.clear();
  for (const auto& t : tower_out_) {
    tower_leaf_.push_back(t.detach().requires_grad_(true));
  }
  return tower_leaf_;
}

void VisionStage::begin_step() {
  tower_seconds_ = 0.0;
  tower_cpu_seconds_ = 0.0;
  gather_seconds_ = 0.0;
  hash_seconds_ = 0.0;
  counts_ = FrameCounts{};
  peak_before_tower_ = 0;
  tower_peak_bytes_ = 0;
  tower_rows_ = 0;
  tower_cu_seqlens_ = at::Tensor();
  tower_grid_ = at::Tensor();
  tower_pieces_.clear();
  bytes_received_ = 0;
  allgather_bytes_received_ = 0;
  plan_ = ShardPlan{};
  mesh_mode_.clear();
  mesh_gain_ = 0.0;
  tower_out_.clear();
  tower_leaf_.clear();
  encoded_.clear();
  encoded_leaf_.clear();
  input_ = TowerInput{};
}

void VisionStage::skip() {
  begin_step();
}

// Keeps encode's outputs (their graph runs the gather's backward) and hands
// the decoder leaves of them.
std::vector<at::Tensor> VisionStage::keep_outputs(
    std::vector<at::Tensor> outputs,
    c10::Device device,
    Clock::time_point start) {
  // encode's own time (plan, slicing, consensus, gather) is all but the
  // tower's.
  gather_seconds_ += elapsed_seconds(start, device) - tower_seconds_;
  encoded_ = std::move(outputs);
  encoded_leaf_.clear();
  for (const auto& t : encoded_) {
    encoded_leaf_.push_back(t.detach().requires_grad_(true));
  }
  return encoded_leaf_;
}

std::vector<at::Tensor> VisionStage::forward(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const EncodeOptions& options) {
  begin_step();
  EncodeOptions o = options;
  if (dedup_) {
    o.unit_keys = hash(pixel_values, grid_thw, group, o.timeout);
  }
  const auto start = Clock::now();
  EncodeResult res = encode(
      [this](const TowerInput& in) { return run_tower(in); },
      pixel_values,
      grid_thw,
      group,
      o);
  count_frames(grid_thw, res.dedup);
  plan_ = std::move(res.plan);
  bytes_received_ = res.bytes_received;
  allgather_bytes_received_ = res.allgather_bytes_received;
  return keep_outputs(std::move(res.outputs), pixel_values.device(), start);
}

std::vector<at::Tensor> VisionStage::forward_mesh(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const EncodeOptions& options,
    const ProcessGroupPtr& hash_group) {
  begin_step();
  EncodeOptions o = options;
  if (dedup_) {
    o.mesh.dedup = true;
    o.unit_keys = hash(pixel_values, grid_thw, hash_group, o.timeout);
  }
  const auto start = Clock::now();
  EncodeResult res = encode_mesh(
      [this](const TowerInput& in) { return run_tower(in); },
      pixel_values,
      grid_thw,
      mesh_group,
      o);
  const bool on_cp_group = res.plan.sharded() &&
                           res.mesh.mode == MeshMode::kCpOnly &&
                           o.mesh.cp_group;
  if (on_cp_group) {
    count_frames(grid_thw, res.dedup);  // the CP path's own counts
  } else {
    count_mesh_frames(
        grid_thw, res.mesh, mesh_group->getRank() / o.mesh.cp, o.unit_keys);
  }
  if (res.plan.sharded()) {
    mesh_mode_ = to_string(res.mesh.mode);
    mesh_gain_ = res.mesh.choice.gain();
  }
  plan_ = std::move(res.plan);
  // Pixels and outputs; there is no all-gather to compare with (0).
  bytes_received_ = res.bytes_received;
  return keep_outputs(std::move(res.outputs), pixel_values.device(), start);
}

namespace {

// The keys of every frame unit, each rank of `group` hashing a contiguous
// share of the media (cut where the pixel rows pass r / size of them) and
// the shares all-gathered (16 bytes a unit): hashing the whole batch on
// every rank would be CP times the work, the redundancy frame sharding
// removes from the tower. A unit's key depends on its rows alone, so the
// shares' keys are the whole batch's. Collective over `group`, whose ranks
// hold the same batch.
std::vector<UnitKey> shared_keys(
    const at::Tensor& pixels,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    const MediaLayout& layout,
    std::chrono::milliseconds timeout) {
  const std::vector<GridThw> grid = grid_from_tensor(grid_thw);
  const FrameSet fs = expand_frames(grid, layout);
  const auto size = static_cast<int64_t>(group->getSize());
  std::vector<int64_t> offset{0};  // first pixel row of each medium
  std::vector<int64_t> units(grid.size(), 0);
  for (size_t m = 0; m < grid.size(); ++m) {
    offset.push_back(offset.back() + grid[m].patches());
  }
  for (const FrameUnit& u : fs.units) {
    units[static_cast<size_t>(u.media)] += 1;
  }
  std::vector<int64_t> cut{0};
  std::vector<int64_t> counts;
  for (int64_t r = 1; r <= size; ++r) {
    const int64_t target = (offset.back() * r + size - 1) / size;
    cut.push_back(
        std::lower_bound(offset.begin(), offset.end() - 1, target) -
        offset.begin());
    counts.push_back(std::accumulate(
        units.begin() + cut[r - 1], units.begin() + cut[r], int64_t{0}));
  }
  const auto rank = static_cast<size_t>(group->getRank());
  const int64_t a = cut[rank];
  const int64_t b = cut[rank + 1];
  const std::vector<UnitKey> mine = frame_keys(
      pixels.narrow(0, offset[a], offset[b] - offset[a]),
      grid_thw.narrow(0, a, b - a),
      layout);
  std::vector<int64_t> words;
  for (const UnitKey& k : mine) {
    words.push_back(static_cast<int64_t>(k.hi));
    words.push_back(static_cast<int64_t>(k.lo));
  }
  at::NoGradGuard no_grad;
  const at::Tensor local = at::tensor(words, at::kLong)
                               .view({static_cast<int64_t>(mine.size()), 2})
                               .to(pixels.device());
  GatherOptions go;
  go.timeout = timeout;
  const at::Tensor all =
      all_gather_rows(local, counts, group, go).cpu().contiguous();
  const int64_t* w = all.data_ptr<int64_t>();
  std::vector<UnitKey> keys(static_cast<size_t>(all.size(0)));
  for (size_t u = 0; u < keys.size(); ++u) {
    keys[u] = {
        static_cast<uint64_t>(w[2 * u]), static_cast<uint64_t>(w[2 * u + 1])};
  }
  return keys;
}

}  // namespace

std::vector<UnitKey> VisionStage::hash(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& group,
    std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  std::vector<UnitKey> keys =
      group && group->getSize() > 1
          ? shared_keys(pixel_values, grid_thw, group, layout_, timeout)
          : frame_keys(pixel_values, grid_thw, layout_);
  hash_seconds_ += elapsed_seconds(start, pixel_values.device());
  return keys;
}

// The replica's units and rows; with keys, encode's count of the distinct
// ones (dedup.units is 0 without keys).
void VisionStage::count_frames(
    const at::Tensor& grid_thw, const FrameDedup& dedup) {
  const FrameSet f = expand_frames(grid_from_tensor(grid_thw), layout_);
  counts_.frames_total = static_cast<int64_t>(f.units.size());
  counts_.rows_total = f.total_patch_rows;
  const bool keyed = dedup.units > 0;
  counts_.frames_distinct = keyed ? dedup.distinct_units : counts_.frames_total;
  counts_.rows_distinct =
      keyed ? dedup.distinct_patch_rows : f.total_patch_rows;
}

// The sharded mesh plans over the mesh's distinct units: this replica's
// share is those first used here. The replicated mesh path dedups each
// replica on its own (encode_mesh), as the CP path does.
void VisionStage::count_mesh_frames(
    const at::Tensor& grid_thw,
    const MeshPlan& plan,
    int64_t replica,
    const std::vector<UnitKey>& keys) {
  const std::vector<GridThw> grid = grid_from_tensor(grid_thw);
  if (!dedup_ || grid.empty() || !plan.plan.sharded()) {
    count_frames(
        grid_thw,
        dedup_ && !grid.empty() ? dedup_frames(grid, keys, layout_)
                                : FrameDedup{});
    return;
  }
  count_frames(grid_thw, FrameDedup{});
  counts_.frames_distinct = 0;
  counts_.rows_distinct = 0;
  const FrameDedup& d = plan.dedup;
  for (int64_t u = 0; u < d.distinct_units; ++u) {
    if (plan.replica_of_unit(d.first_use[static_cast<size_t>(u)]) == replica) {
      counts_.frames_distinct += 1;
      counts_.rows_distinct +=
          plan.plan.frames.units[static_cast<size_t>(u)].patch_rows;
    }
  }
}

WorkloadSample VisionStage::tower_workload(
    const CostModel& flops, bool split, double seconds) const {
  if (!tower_cu_seqlens_.defined()) {
    return WorkloadSample{};
  }
  // After the tower's timing: on a GPU these copies wait for nothing more.
  const at::Tensor cu = tower_cu_seqlens_.to(at::kCPU, at::kLong).contiguous();
  const int64_t* v = cu.data_ptr<int64_t>();
  return call_workload(
      {v, v + cu.numel()},
      grid_from_tensor(tower_grid_.to(at::kCPU)),
      tower_pieces_,
      flops,
      split,
      seconds);
}

void read_vision_metrics(const VisionStage& v, StepMetrics& m) {
  m.vision_seconds = v.tower_seconds();
  m.vision_cpu_seconds = v.tower_cpu_seconds();
  m.gather_seconds = v.gather_seconds();
  m.hash_seconds = v.hash_seconds();
  const FrameCounts& counts = v.frame_counts();
  m.frames_total = counts.frames_total;
  m.frames_distinct = counts.frames_distinct;
  m.rows_total = counts.rows_total;
  m.rows_distinct = counts.rows_distinct;
  m.tower_rows = v.tower_rows();
  m.visual_bytes_received = v.bytes_received();
  m.allgather_bytes_received = v.allgather_bytes_received();
  m.plan_path = to_string(v.plan().path);
  m.mesh_mode = v.mesh_mode();
  m.mesh_gain = v.mesh_gain();
}

namespace {
std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& leaves) {
  std::vector<at::Tensor> g;
  for (const auto& l : leaves) {
    g.push_back(l.grad().defined() ? l.grad() : at::zeros_like(l));
  }
  return g;
}
}  // namespace

void VisionStage::backward_gather() {
  if (encoded_.empty()) {
    return;  // no vision this step, or no outputs for this replica
  }
  const auto start = Clock::now();
  const auto device = encoded_[0].device();
  // On the replicated path encode returns the leaves themselves (or views
  // of them); backward through them still lands in the leaves' grads.
  torch::autograd::backward(encoded_, grads_of(encoded_leaf_));
  gather_seconds_ += elapsed_seconds(start, device);
  encoded_.clear();
  encoded_leaf_.clear();
}

void VisionStage::backward_tower() {
  if (tower_out_.empty()) {
    return;  // the tower did not run this step
  }
  const auto device = input_.pixel_values.device();
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  std::vector<at::Tensor> grads = grads_of(tower_leaf_);
  if (checkpointing_) {
    tower_out_ = tower_(input_);
  }
  torch::autograd::backward(tower_out_, grads);
  tower_seconds_ += elapsed_seconds(start, device);
  tower_cpu_seconds_ += thread_cpu_seconds() - cpu_start;
  tower_out_.clear();
  tower_leaf_.clear();
  input_ = TowerInput{};
}

}  // namespace detail
}  // namespace train
}  // namespace frameshard
