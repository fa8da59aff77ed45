// File: frameshard/runtime/frame_keys.h
//
// Content keys of frame units for frame_sharding.dedup
// (frameshard/dedup.h): a 128-bit hash of each unit's pixel rows, mixed
// with the unit's shape, the feature width and the dtype. Two lanes with
// independent constants: each takes a row's elements as integers (their
// bits), sums them times odd pseudo-random per-column weights (a
// multilinear hash: any single changed element changes the sum), mixes the
// row sum with the row's index inside its unit, and sums the unit's rows.
// Integer sums wrap modulo 2^64, so the result does not depend on the
// reduction order: the same on CPU and CUDA, any thread count.
//
// Cost (bench/dedup_cost.py, docs/performance.md "Dedup"): on the CPU one
// pass over the bytes, vectorised where the CPU multiplies 64-bit lanes
// (AVX-512DQ: 7.3 GB/s of float32 on one core of this project's machine,
// against 0.45 GB/s for the tensor ops); on a GPU five elementwise passes
// of tensor ops over the rows as int64, in chunks of 4 Mi elements, and
// one host copy of two int64 per unit (runtime/frame_key_sums.h).
//
// Usage:
//   auto keys = frameshard::frame_keys(pixel_values, grid_thw, layout);
//   auto d = frameshard::dedup_frames(grid, keys, layout);
//
// Not collective.
#pragma once

#include <frameshard/dedup.h>

#include <ATen/ATen.h>

#include <vector>

namespace frameshard {

/// One key per frame unit of `grid_thw` (expand_frames order).
/// frameshard::Error for a bad grid or pixel rows that do not match it.
std::vector<UnitKey> frame_keys(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const MediaLayout& layout = {});

}  // namespace frameshard
