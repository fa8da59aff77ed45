// File: frameshard/build_info.h
//
// What this build of frameshard is: its version and git revision, the torch
// it was compiled against and whether the CUDA and NCCL paths are compiled
// in. `frameshard --version`, `frameshard.build_info()` and
// `frameshard.__version__` print these, the first thing a bug report needs.
//
// Usage:
//   const frameshard::BuildInfo& b = frameshard::build_info();
//   std::cout << frameshard::describe(b);   // "frameshard 0.1.0 (bab949c) ..."
//
// Pure, thread-safe (constants fixed when the library was compiled).
#pragma once

#include <string>

namespace frameshard {

struct BuildInfo {
  std::string version;        // the CMake project version, e.g. "0.1.0"
  std::string git_revision;   // `git describe --always --dirty`, or "unknown"
  std::string torch_version;  // the LibTorch compiled against; "" if none
  bool cuda = false;          // a CUDA LibTorch (CUDA paths compiled)
  bool nccl = false;          // the NCCL process-group path compiled
  bool gloo_groups = false;   // C++ can create Gloo groups (gloo headers)
  std::string build_type;     // CMAKE_BUILD_TYPE
  std::string compiler;       // e.g. "GNU 12.2.0"
};

/// This build's facts.
const BuildInfo& build_info();

/// Several lines: "frameshard 0.1.0 (git bab949c)", then torch, CUDA, NCCL,
/// Gloo groups, build type and compiler, one "key: value" per line.
std::string describe(const BuildInfo& info);

}  // namespace frameshard
