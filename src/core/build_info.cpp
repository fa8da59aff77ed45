// This build's facts (frameshard/build_info.h). CMake defines the FRAMESHARD_
// BUILD_* macros on this source alone, and the git revision comes from a
// header regenerated on every build when the revision changes, so a commit
// recompiles this one file (it is kept out of the unity batches).
#include <frameshard/build_info.h>

#include "frameshard_git_revision.h"  // FRAMESHARD_GIT_REVISION

#include <sstream>

#ifndef FRAMESHARD_BUILD_VERSION
#define FRAMESHARD_BUILD_VERSION "unknown"
#endif
#ifndef FRAMESHARD_BUILD_TORCH
#define FRAMESHARD_BUILD_TORCH ""
#endif
#ifndef FRAMESHARD_BUILD_CUDA
#define FRAMESHARD_BUILD_CUDA 0
#endif
#ifndef FRAMESHARD_BUILD_NCCL
#define FRAMESHARD_BUILD_NCCL 0
#endif
#ifndef FRAMESHARD_BUILD_GLOO_GROUPS
#define FRAMESHARD_BUILD_GLOO_GROUPS 0
#endif
#ifndef FRAMESHARD_BUILD_TYPE
#define FRAMESHARD_BUILD_TYPE ""
#endif
#ifndef FRAMESHARD_BUILD_COMPILER
#define FRAMESHARD_BUILD_COMPILER ""
#endif

namespace frameshard {

const BuildInfo& build_info() {
  static const BuildInfo kInfo = [] {
    BuildInfo b;
    b.version = FRAMESHARD_BUILD_VERSION;
    b.git_revision = FRAMESHARD_GIT_REVISION;
    b.torch_version = FRAMESHARD_BUILD_TORCH;
    b.cuda = FRAMESHARD_BUILD_CUDA != 0;
    b.nccl = FRAMESHARD_BUILD_NCCL != 0;
    b.gloo_groups = FRAMESHARD_BUILD_GLOO_GROUPS != 0;
    b.build_type = FRAMESHARD_BUILD_TYPE;
    b.compiler = FRAMESHARD_BUILD_COMPILER;
    return b;
  }();
  return kInfo;
}

std::string describe(const BuildInfo& info) {
  auto yes_no = [](bool v) { return v ? "yes" : "no"; };
  std::ostringstream os;
  os << "frameshard " << info.version << " (git " << info.git_revision << ")\n"
     << "torch: "
     << (info.torch_version.empty() ? "none (torch-free core only)"
                                    : info.torch_version)
     << "\n"
     << "cuda: " << yes_no(info.cuda) << "\n"
     << "nccl: " << yes_no(info.nccl) << "\n"
     << "gloo groups: " << yes_no(info.gloo_groups) << "\n"
     << "build: " << info.build_type << ", " << info.compiler << "\n";
  return os.str();
}

}  // namespace frameshard
