// File: tests/testing/expect_error.h
//
// Helpers for tests of the torch-free core's error messages
// ("frameshard::fn: expected X, got Y", see include/frameshard/error.h).
//
// Usage:
//   using frameshard::testing::error_of;
//   using frameshard::testing::expect_contains;
//   std::string m = error_of([&] { tower_preset("qwen4"); });
//   expect_contains(m, "frameshard::tower_preset: expected one of");
//
// Inside namespace frameshard, `testing` names this namespace: spell
// GoogleTest's as ::testing.
#pragma once

#include <frameshard/error.h>

#include <gtest/gtest.h>

#include <string>

namespace frameshard {
namespace testing {

// Runs `fn`, expects a frameshard::Error and returns its message; a call that
// does not throw is a test failure (and returns "").
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected frameshard::Error";
  return "";
}

// Expects `part` somewhere in `msg`; on failure prints both.
inline void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos)
      << "message: " << msg << "\nmissing: " << part;
}

}  // namespace testing
}  // namespace frameshard
