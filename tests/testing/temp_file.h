// File: tests/testing/temp_file.h
//
// A file holding the given text in a fresh scratch directory, removed with
// it when the object goes (for tests of loaders that take a path).
//
// Usage:
//   frameshard::testing::TempFile f("{\"grid_thw\": [[1, 4, 4]]}");
//   const Workload wl = load_workload(f.path());
//   f.write("not json");  // the same path, new text
#pragma once

#include <fstream>
#include <string>

#include "testing/scratch_dir.h"

namespace frameshard {
namespace testing {

class TempFile {
 public:
  explicit TempFile(const std::string& text) : path_(dir_.path() + "/file") {
    write(text);
  }

  /// Replaces the file's text.
  void write(const std::string& text) const {
    std::ofstream(path_) << text;
  }

  const std::string& path() const {
    return path_;
  }

 private:
  ScratchDir dir_;  // before path_, which is made from it
  std::string path_;
};

}  // namespace testing
}  // namespace frameshard
