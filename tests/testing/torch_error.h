// File: tests/testing/torch_error.h
//
// Helpers for tests of the LibTorch layers' error messages (c10::Error
// raised through FRAMESHARD_TORCH_CHECK, "frameshard::fn: expected X, got
// Y"); expect_error.h is the torch-free core's frameshard::Error.
//
// Usage:
//   using frameshard::testing::torch_error_of;
//   EXPECT_TORCH_ERROR_CONTAINS(SafetensorsFile("x"), "no such file");
//   EXPECT_EQ(torch_error_of([&] { make_qwen_vision(cfg); }), "");
#pragma once

#include "testing/expect_error.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace frameshard {
namespace testing {

/// The message of what `fn` throws, without c10's backtrace; "" when it
/// does not throw (so a test can also assert that a call succeeds).
template <typename Fn>
std::string torch_error_of(Fn&& fn) {
  return thrown_message<std::exception>(
             fn,
             [](const std::exception& e) -> std::string {
               const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
               return c10_error ? c10_error->what_without_backtrace()
                                : e.what();
             })
      .value_or("");
}

}  // namespace testing
}  // namespace frameshard

/// Expects `stmt` to throw an error whose message contains `text`.
#define EXPECT_TORCH_ERROR_CONTAINS(stmt, text)                                \
  do {                                                                         \
    const std::string msg_ =                                                   \
        ::frameshard::testing::torch_error_of([&] { stmt; });                  \
    EXPECT_NE(msg_.find(text), std::string::npos)                              \
        << "expected an error containing \"" << (text) << "\", got \"" << msg_ \
        << "\"";                                                               \
  } while (false)
