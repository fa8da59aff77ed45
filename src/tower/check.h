// !!! Internal header of the LibTorch layers (tower, models, runtime). !!!
//
// FRAMESHARD_TORCH_CHECK: TORCH_CHECK with frameshard's error prefix, so the
// LibTorch layers raise c10::Error worded like the core's frameshard::Error
// ("frameshard::<fn>: expected X, got Y"; see frameshard/error.h, which
// builds the prefix). Collectives that know the rank build their prefix with
// error_prefix(fn, rank, world) instead (runtime/collectives.h).
//
// Also the text of a caught exception, as ranks report it (exception_text).
//
// Usage:
//   FRAMESHARD_TORCH_CHECK(x.dim() == 2, "encode",
//                          "expected a 2-D tensor, got ", x.dim(), " dims");
#pragma once

#include <frameshard/error.h>

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace frameshard {
namespace detail {

/// The message of `e` without c10's C++ backtrace ("an unknown exception"
/// for a non-std exception): what a rank reports to its peers.
std::string exception_text(const std::exception_ptr& e);

}  // namespace detail
}  // namespace frameshard

#define FRAMESHARD_TORCH_CHECK(cond, fn, ...) \
  TORCH_CHECK(cond, ::frameshard::detail::error_prefix(fn), __VA_ARGS__)
