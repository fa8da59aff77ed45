// Fuzz target: the safetensors file reader (frameshard::models::
// SafetensorsFile: length prefix, JSON header, layout of the entries in the
// byte buffer, tensor reads; src/models/safetensors_*.cpp compiled into this
// harness without the models layer). The reader opens paths, so each input
// is written to a file in /dev/shm (memory) first. Every input must open or
// raise c10::Error / frameshard::Error; in what opens, every tensor of a
// readable dtype reads back with the header's shape and dtype (others raise),
// and save_safetensors + a second read give the same bytes and metadata.
//
// Usage (a -DFRAMESHARD_FUZZ=ON build with FRAMESHARD_FUZZ_TORCH on):
//   build-fuzz/tests/fuzz/safetensors_fuzz tests/fuzz/corpus/safetensors
//   -max_total_time=30
#include <frameshard/error.h>
#include <frameshard/models/safetensors.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

namespace {

using frameshard::models::SafetensorsFile;

std::string scratch_path(const char* what) {
  return "/dev/shm/frameshard-fuzz-" + std::to_string(getpid()) + "-" + what +
         ".safetensors";
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         a.is_contiguous() && b.is_contiguous() &&
         (a.nbytes() == 0 ||
          std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

// The tensors of the opened file `in`; aborts on a broken property.
std::map<std::string, at::Tensor> read_all(const SafetensorsFile& in) {
  std::map<std::string, at::Tensor> out;
  for (const auto& name : in.names()) {
    const auto& e = in.entry(name);
    if (e.dtype == at::ScalarType::Undefined) {
      try {
        in.read(name);
      } catch (const c10::Error&) {
        continue;  // a dtype frameshard does not read: a clear error
      }
      std::abort();
    }
    at::Tensor t = in.read(name);
    if (t.scalar_type() != e.dtype || t.sizes() != at::IntArrayRef(e.shape) ||
        static_cast<int64_t>(t.nbytes()) != e.end - e.begin) {
      std::abort();
    }
    out.emplace(name, t);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = scratch_path("in");
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<long>(size));
    if (!f) {
      std::abort();  // /dev/shm full: not a finding, but stop loudly
    }
  }
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
  try {
    const SafetensorsFile in(path);
    tensors = read_all(in);
    metadata = in.metadata();
  } catch (const c10::Error&) {
    std::remove(path.c_str());
    return 0;
  } catch (const frameshard::Error&) {
    std::remove(path.c_str());
    return 0;
  }
  std::remove(path.c_str());
  // What was read writes and reads back the same (tensors of unreadable
  // dtypes are left out).
  const std::string copy = scratch_path("copy");
  frameshard::models::save_safetensors(copy, tensors, metadata);
  std::map<std::string, std::string> metadata_again;
  const auto again =
      frameshard::models::load_safetensors(copy, &metadata_again);
  std::remove(copy.c_str());
  if (again.size() != tensors.size() || metadata_again != metadata) {
    std::abort();
  }
  for (const auto& kv : tensors) {
    auto it = again.find(kv.first);
    if (it == again.end() || !same_bytes(kv.second, it->second)) {
      std::abort();
    }
  }
  return 0;
}
