// !!! Internal header of frameshard::runtime, not installed. !!!
// The lane sums behind frame_keys (frameshard/runtime/frame_keys.h), in two
// implementations that give the same bits:
//   - unit_lane_sums_tensor: tensor ops on the pixels' device (CUDA), five
//     elementwise passes over the rows as int64;
//   - unit_lane_sums_cpu: one pass over a CPU tensor's bytes, each element
//     read once and multiplied by its two lane weights in registers: the
//     hash at memory speed on the CPU, where the tensor ops ran at about
//     0.46 GB/s on one core (issue 46).
// Per lane l and unit u: the wrapping sum over u's rows r (index i inside
// u) of mix(row_sum_l(r) + i * lane.row, lane.mix), where row_sum_l(r) is
// the wrapping sum over columns c of int(x[r, c]) * weight_l(c): the
// element's bits as an integer of its width (unsigned for 1-byte elements,
// signed otherwise), widened to 64 bits. Every sum wraps modulo 2^64, so
// the order of the additions (threads, devices) does not matter.
// Defined in src/runtime/frame_key_sums.cpp.
#pragma once

#include <frameshard/frames.h>

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

namespace frameshard {
namespace internal {

using LaneSums = std::array<uint64_t, 2>;

/// One entry per unit of `fs` (whose units tile the rows of `pixels`, a
/// [rows, features] tensor on any device); tensor ops.
std::vector<LaneSums> unit_lane_sums_tensor(
    const at::Tensor& pixels, const FrameSet& fs);

/// The same, in one pass over a CPU tensor (made contiguous first);
/// at::parallel_for over rows.
std::vector<LaneSums> unit_lane_sums_cpu(
    const at::Tensor& pixels, const FrameSet& fs);

}  // namespace internal
}  // namespace frameshard
