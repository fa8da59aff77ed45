// !!! Internal header of the LibTorch layers (tower, models, runtime). !!!
//
// FRAMESHARD_TORCH_CHECK: TORCH_CHECK with frameshard's error prefix, so the
// LibTorch layers raise c10::Error worded like the core's frameshard::Error
// ("frameshard::<fn>: expected X, got Y"; see frameshard/error.h, which
// builds the prefix). Collectives that know the rank build their prefix with
// error_prefix(fn, rank, world) instead (runtime/collectives.h).
//
// Usage:
//   FRAMESHARD_TORCH_CHECK(x.dim() == 2, "encode",
//                          "expected a 2-D tensor, got ", x.dim(), " dims");
#pragma once

#include <frameshard/error.h>

#include <c10/util/Exception.h>

#define FRAMESHARD_TORCH_CHECK(cond, fn, ...) \
  TORCH_CHECK(cond, ::frameshard::detail::error_prefix(fn), __VA_ARGS__)
