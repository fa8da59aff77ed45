// !!! Internal header of frameshard::models, not installed. !!!
//
// The index math of the Qwen-VL towers (private; used by qwen_blocks and
// the per-family files): a TowerInput's validated frame geometry, the
// processor's patch coordinates, 2-D rotary tables, Qwen2.5-VL's window
// permutation and Qwen3-VL's bilinear position taps. Pure functions of the
// grid: no parameters.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/tower.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace models {
namespace detail {

/// The validated geometry of a TowerInput: grid rows, per-frame segments
/// and, for split frames, the pieces and where the local rows sit among the
/// whole frames' rows.
struct FrameGeometry {
  std::vector<GridThw> grid;  // local grid rows, whole-frame geometry
  std::vector<int64_t> cu;    // per local frame, from 0 to rows (a piece
                              // frame's segment is the piece's rows)
  int64_t rows = 0;           // local pixel rows
  std::vector<FramePiece> pieces;
  /// int64 [rows]: the index of every local row among the rows of the
  /// whole frames of `grid` (sum of t*h*w); undefined without pieces.
  at::Tensor local_rows;

  /// `whole` (one row per row of the whole frames, e.g. patch coordinates
  /// or position taps) restricted to the local rows; `whole` itself
  /// without pieces.
  at::Tensor local(const at::Tensor& whole) const;
};

/// Checks pixel_values [rows, in_features], grid_thw [n, 3] (positive, h
/// and w divisible by merge), the pieces (ascending local frames, rows
/// [begin, end) inside the frame, multiples of merge^2, not empty), rows ==
/// sum over frames of h*w or the piece's rows and, when defined, cu_seqlens
/// == those per-frame segments. `fn` names the tower.
FrameGeometry check_tower_input(
    const TowerInput& input,
    int64_t in_features,
    int64_t merge,
    const char* fn);

/// [rows, 2] int64 (h, w) patch coordinates of every pixel row: per frame,
/// merge x merge windows row-major, the window's patches row-major inside
/// (the processor's row order), repeated for every temporal index.
at::Tensor patch_coordinates(const std::vector<GridThw>& grid, int64_t merge);

/// Rotary tables [rows, head_dim] in `dtype`: per row the angles of h then
/// w over head_dim / 4 frequencies theta^(-2i / (head_dim / 2)), the whole
/// repeated twice (rotate_half convention). cos and sin are correctly
/// rounded (libm in double, one thread), computed on the CPU and returned
/// on coords' device.
struct Rotary {
  at::Tensor cos, sin;
};
Rotary rotary_tables(
    const at::Tensor& coords,
    int64_t head_dim,
    double theta,
    at::ScalarType dtype);

/// Qwen2.5-VL windows (HF get_window_index): `index` (int64 [rows / unit])
/// lists merge units in window order, `inverse` undoes it, `cu` holds the
/// window segments over pixel rows (empty windows dropped).
struct WindowIndex {
  at::Tensor index;
  at::Tensor inverse;
  std::vector<int64_t> cu;
};
/// With split frames (geo.pieces) a piece's windows are the windows of its
/// rows: a piece must hold whole window rows (begin and end multiples of
/// merger_window_size * merge * w, or end at the frame's end), else it
/// raises naming the piece; `fn` names the tower.
WindowIndex window_index(
    const FrameGeometry& geo,
    int64_t merge,
    int64_t merger_window_size,
    const char* fn);

/// Rows grouped by `unit` consecutive rows, reordered by `index`.
at::Tensor permute_units(
    const at::Tensor& x, const at::Tensor& index, int64_t unit);

/// Qwen3-VL's learned positions: bilinear (align_corners) taps into the
/// side x side table for every pixel row: indices int64 [rows, 4], weights
/// [rows, 4] in `dtype` (taps (h0,w0), (h0,w1), (h1,w0), (h1,w1)).
struct Interpolation {
  at::Tensor indices, weights;
};
Interpolation bilinear_positions(
    const std::vector<GridThw>& grid,
    const at::Tensor& coords,
    int64_t side,
    at::ScalarType dtype);

}  // namespace detail
}  // namespace models
}  // namespace frameshard
