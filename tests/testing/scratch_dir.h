// File: tests/testing/scratch_dir.h
//
// A fresh empty directory under the system's temporary directory, removed
// with everything in it when the object goes (for tests that write files
// without the multi-rank harness of run_ranks.h).
//
// Usage:
//   frameshard::testing::ScratchDir dir;
//   save_safetensors(dir.path() + "/t.safetensors", tensors);
#pragma once

#include <stdlib.h>  // mkdtemp (POSIX)

#include <filesystem>
#include <stdexcept>
#include <string>

namespace frameshard {
namespace testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string name =
        (std::filesystem::temp_directory_path() / "frameshard_test_XXXXXX")
            .string();
    if (mkdtemp(name.data()) == nullptr) {
      throw std::runtime_error("ScratchDir: cannot create " + name);
    }
    path_ = name;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const {
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace testing
}  // namespace frameshard
