// Fuzz target: a sharded checkpoint's model.safetensors.index.json
// (frameshard::models::SafetensorsCheckpoint::open, src/models/
// safetensors_checkpoint.cpp). Each input is written as the index of a
// checkpoint directory in /dev/shm holding three small shards (a, b,
// sub/c.safetensors); a valid shard with every tensor name lies just outside
// it, so an index that escapes the directory opens instead of failing. Every
// input must open or raise c10::Error / frameshard::Error; what opens reads
// only files inside the directory, and every tensor it names reads back with
// its entry's shape and dtype.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build with FRAMESHARD_FUZZ_TORCH on):
//   build-fuzz/tests/fuzz/safetensors_index_fuzz
//   tests/fuzz/corpus/safetensors_index -max_total_time=30
#include <frameshard/error.h>
#include <frameshard/models/safetensors.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <unistd.h>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using frameshard::models::save_safetensors;

// The checkpoint directory (made once per process) and the outside shard.
struct Scratch {
  fs::path root;
  fs::path dir;
  Scratch() {
    root = "/dev/shm/frameshard-fuzz-" + std::to_string(getpid()) + "-index";
    dir = root / "ckpt";
    fs::create_directories(dir / "sub");
    save_safetensors(
        (dir / "a.safetensors").string(),
        {{"x", at::arange(2, at::kFloat)},
         {"y", at::scalar_tensor(7, at::kLong)}});
    save_safetensors(
        (dir / "b.safetensors").string(),
        {{"z", at::ones({1, 2}, at::kBFloat16)}});
    save_safetensors(
        (dir / "sub" / "c.safetensors").string(),
        {{"w", at::zeros({0, 3}, at::kInt)}});
    const at::Tensor t = at::ones({1});
    save_safetensors(
        (root / "outside.safetensors").string(),
        {{"x", t}, {"y", t}, {"z", t}, {"w", t}, {"o", t}});
    dir = fs::canonical(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

bool inside(const fs::path& dir, const std::string& file) {
  const std::string d = dir.string() + "/";
  const std::string f = fs::weakly_canonical(file).string();
  return f.compare(0, d.size(), d) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Scratch scratch;
  {
    std::ofstream f(
        scratch.dir / "model.safetensors.index.json",
        std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<long>(size));
    if (!f) {
      std::abort();  // /dev/shm full: not a finding, but stop loudly
    }
  }
  frameshard::models::SafetensorsCheckpoint ck;
  try {
    ck = frameshard::models::SafetensorsCheckpoint::open(scratch.dir.string());
  } catch (const c10::Error&) {
    return 0;
  } catch (const frameshard::Error&) {
    return 0;
  }
  const auto files = ck.files();
  for (const auto& file : files) {
    if (!inside(scratch.dir, file)) {
      std::abort();  // a shard outside the checkpoint directory was opened
    }
  }
  for (const auto& name : ck.names()) {
    const auto& e = ck.entry(name);
    const at::Tensor t = ck.read(name);
    if (t.scalar_type() != e.dtype || t.sizes() != at::IntArrayRef(e.shape) ||
        std::find(files.begin(), files.end(), ck.file_of(name)) ==
            files.end()) {
      std::abort();
    }
  }
  return 0;
}
