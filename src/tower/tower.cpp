// The tower contract's helpers (frameshard/tower.h).

#include <frameshard/tower.h>

#include "tower/check.h"

#include <torch/nn/module.h>

#include <limits>
#include <sstream>
#include <string>

namespace frameshard {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

at::Tensor offsets_to_int32(
    const std::vector<int64_t>& cu, c10::Device device, const char* fn) {
  std::vector<int32_t> cu32;
  cu32.reserve(cu.size());
  for (int64_t v : cu) {
    FRAMESHARD_TORCH_CHECK(
        v >= 0 && v <= std::numeric_limits<int32_t>::max(),
        fn,
        "expected cu_seqlens entries to fit int32, got ",
        v);
    cu32.push_back(static_cast<int32_t>(v));
  }
  return at::tensor(cu32, at::TensorOptions().dtype(at::kInt)).to(device);
}

}  // namespace

std::vector<GridThw> grid_from_tensor(const at::Tensor& grid_thw) {
  constexpr const char* kFn = "grid_from_tensor";
  FRAMESHARD_TORCH_CHECK(
      grid_thw.defined(),
      kFn,
      "expected an integer [n, 3] tensor, got an undefined tensor");
  const bool integral = at::isIntegralType(grid_thw.scalar_type(), false);
  FRAMESHARD_TORCH_CHECK(
      integral && grid_thw.dim() == 2 && grid_thw.size(1) == 3,
      kFn,
      "expected an integer [n, 3] tensor, got ",
      grid_thw.scalar_type(),
      " of shape ",
      shape_text(grid_thw));
  at::Tensor cpu = grid_thw.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = cpu.data_ptr<int64_t>();
  std::vector<GridThw> grid;
  grid.reserve(static_cast<size_t>(cpu.size(0)));
  for (int64_t i = 0; i < cpu.size(0); ++i) {
    grid.push_back(GridThw{p[3 * i], p[3 * i + 1], p[3 * i + 2]});
  }
  return grid;
}

at::Tensor grid_to_tensor(
    const std::vector<GridThw>& grid, c10::Device device) {
  std::vector<int64_t> flat;
  flat.reserve(grid.size() * 3);
  for (const auto& g : grid) {
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  return at::tensor(flat, at::TensorOptions().dtype(at::kLong))
      .reshape({static_cast<int64_t>(grid.size()), 3})
      .to(device);
}

TowerInput whole_frames_input(
    const at::Tensor& pixel_values, const std::vector<GridThw>& grid) {
  TowerInput in;
  in.pixel_values = pixel_values;
  in.grid_thw = grid_to_tensor(grid, pixel_values.device());
  in.cu_seqlens = frame_cu_seqlens(grid, pixel_values.device());
  return in;
}

at::Tensor frame_cu_seqlens(
    const std::vector<GridThw>& grid, c10::Device device) {
  return offsets_to_int32(frame_offsets(grid), device, "frame_cu_seqlens");
}

at::Tensor cu_seqlens_tensor(
    const std::vector<int64_t>& offsets, c10::Device device) {
  return offsets_to_int32(offsets, device, "cu_seqlens_tensor");
}

bool has_trainable_parameters(const torch::nn::Module& module) {
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad()) {
      return true;
    }
  }
  return false;
}

}  // namespace frameshard
