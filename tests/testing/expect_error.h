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

#include <optional>
#include <string>

namespace frameshard {
namespace testing {

// Runs `fn` and returns what `read` makes of the E it throws; nullopt when
// it throws nothing (anything but an E propagates).
template <typename E, typename Fn, typename Read>
std::optional<std::string> thrown_message(Fn&& fn, Read&& read) {
  try {
    fn();
  } catch (const E& e) {
    return read(e);
  }
  return std::nullopt;
}

// Runs `fn`, expects a frameshard::Error and returns its message; a call that
// does not throw is a test failure (and returns "").
template <typename Fn>
std::string error_of(Fn&& fn) {
  const std::optional<std::string> msg = thrown_message<Error>(
      fn, [](const Error& e) { return std::string(e.what()); });
  if (!msg) {
    ADD_FAILURE() << "expected frameshard::Error";
    return "";
  }
  return *msg;
}

// Expects `part` somewhere in `msg`; on failure prints both.
inline void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos)
      << "message: " << msg << "\nmissing: " << part;
}

}  // namespace testing
}  // namespace frameshard
