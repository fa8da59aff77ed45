// The vision stage of a training step: encode with a timed tower, backward
// in two phases (see vision_stage.h).
#include "train/vision_stage.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <time.h>

#include <algorithm>
#include <chrono>
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
    VisionTower tower, bool checkpointing, MemoryStats* memory)
    : tower_(std::move(tower)),
      checkpointing_(checkpointing),
      memory_(memory) {}

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
  peak_before_tower_ = 0;
  tower_peak_bytes_ = 0;
  tower_rows_ = 0;
  bytes_received_ = 0;
  allgather_bytes_received_ = 0;
  plan_ = ShardPlan{};
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
  const auto start = Clock::now();
  EncodeResult res = encode(
      [this](const TowerInput& in) { return run_tower(in); },
      pixel_values,
      grid_thw,
      group,
      options);
  plan_ = std::move(res.plan);
  bytes_received_ = res.bytes_received;
  allgather_bytes_received_ = res.allgather_bytes_received;
  return keep_outputs(std::move(res.outputs), pixel_values.device(), start);
}

std::vector<at::Tensor> VisionStage::forward_mesh(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const ProcessGroupPtr& mesh_group,
    const MeshEncodeOptions& options) {
  begin_step();
  const auto start = Clock::now();
  MeshEncodeResult res = encode_mesh(
      [this](const TowerInput& in) { return run_tower(in); },
      pixel_values,
      grid_thw,
      mesh_group,
      options);
  plan_ = std::move(res.plan.plan);
  // Pixels and outputs; there is no all-gather to compare with (0).
  bytes_received_ = res.bytes_received;
  return keep_outputs(std::move(res.outputs), pixel_values.device(), start);
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
