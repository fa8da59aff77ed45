// File: frameshard/tower.h
//
// The tower contract: what a vision tower receives and returns, shared by the
// towers (frameshard::models) and the runtime that shards them
// (frameshard::runtime) without either depending on the other. Needs ATen,
// never c10d. No call here is collective.
//
// A tower is anything callable on a TowerInput (the packed pixel rows of some
// frames, their grid_thw and one cu_seqlens segment per frame) returning one
// or more [merged tokens, hidden_i] tensors of one dtype (e.g. embeddings and
// DeepStack features).
//
// Usage:
//   std::vector<frameshard::GridThw> grid = {{1, 8, 12}, {4, 4, 4}};
//   frameshard::TowerInput in = frameshard::whole_frames_input(pixels, grid);
//   std::vector<at::Tensor> outs = tower(in);  // a frameshard::VisionTower
#pragma once

#include <frameshard/frames.h>

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace frameshard {

/// Split frames: sends the rows of this rank's pieces to the other ranks
/// holding pieces of the same frames. `rows` is [local rows, F]: all local
/// rows, one cu_seqlens segment per local frame (in the tower's current row
/// order). Returns 1 + pieces tensors: first `rows` again, same values, tied
/// to the collective (use it in place of `rows`: its backward then runs the
/// collective's backward on every rank, also on a rank whose rows no piece
/// uses); then, per piece of TowerInput::pieces in order, the whole frame's
/// rows: every piece's rows, pieces in rank order (= frame row order), each
/// in the order its holder passed them, this rank's own rows taken from the
/// first tensor. Differentiable: the backward returns each row's gradient,
/// summed over every rank that used it, to the rank that sent it.
/// Collective over the CP group: when set, every rank calls it once per
/// full-attention layer, in layer order, even a rank without pieces; a rank
/// whose tower fails makes every rank raise the same error
/// (frameshard/runtime/encode.h).
using PieceExchange =
    std::function<std::vector<at::Tensor>(const at::Tensor& rows)>;

/// What the tower receives: the local frames only.
struct TowerInput {
  at::Tensor pixel_values;  // [local_patch_rows, features], same dtype/device
                            // as the global pixel_values
  at::Tensor grid_thw;      // int64 [local grid rows, 3], same device as
                            // pixel_values (Qwen towers index with it)
  at::Tensor cu_seqlens;    // int32 [local frames + 1], one segment per frame
  /// Split frames (frameshard/frames.h FramePiece): local frames of which
  /// this rank holds only rows [begin, end); their grid row is the whole
  /// frame's geometry and their cu_seqlens segment the piece's rows. A
  /// tower attends each piece's queries to the whole frame's keys and
  /// values from `exchange`, computes positions from the whole frame's
  /// geometry at the piece's offset, and keeps every other layer local.
  /// Empty and unset unless the plan split a frame.
  std::vector<FramePiece> pieces;
  PieceExchange exchange;
};

using VisionTower = std::function<std::vector<at::Tensor>(const TowerInput&)>;

/// The input of whole frames: `pixel_values`, the int64 grid_thw of `grid`
/// and its frame_cu_seqlens, both on pixel_values' device.
TowerInput whole_frames_input(
    const at::Tensor& pixel_values, const std::vector<GridThw>& grid);

/// Converts an integer [n, 3] tensor into grid rows (errors name the shape).
std::vector<GridThw> grid_from_tensor(const at::Tensor& grid_thw);

/// The int64 [n, 3] tensor of `grid` on `device` (inverse of
/// grid_from_tensor).
at::Tensor grid_to_tensor(
    const std::vector<GridThw>& grid,
    c10::Device device = c10::Device(c10::kCPU));

/// The cu_seqlens a Qwen-style tower takes for `grid`: int32 [frames + 1],
/// one segment of h*w rows per temporal patch (frame), on `device`. Raises if
/// a cumulative row count does not fit int32.
at::Tensor frame_cu_seqlens(
    const std::vector<GridThw>& grid,
    c10::Device device = c10::Device(c10::kCPU));

/// `offsets` (e.g. a plan's RankShard::cu_seqlens) as an int32 tensor on
/// `device`; raises if an entry does not fit int32.
at::Tensor cu_seqlens_tensor(
    const std::vector<int64_t>& offsets,
    c10::Device device = c10::Device(c10::kCPU));

/// True if any parameter of `module` requires grad (encode's
/// EncodeOptions::tower_trainable).
bool has_trainable_parameters(const torch::nn::Module& module);

}  // namespace frameshard
