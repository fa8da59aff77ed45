// save_safetensors (see frameshard/models/safetensors.h).
#include "models/safetensors_detail.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace frameshard {
namespace models {

void save_safetensors(
    const std::string& path,
    const std::map<std::string, at::Tensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  const char* fn = "save_safetensors";
  detail::check_little_endian();
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  std::vector<at::Tensor> data;
  int64_t offset = 0;
  for (const auto& kv : tensors) {
    FRAMESHARD_TORCH_CHECK(
        !kv.first.empty() && kv.first != "__metadata__",
        fn,
        "expected tensor names other than \"\" and \"__metadata__\", got \"",
        kv.first,
        "\"");
    FRAMESHARD_TORCH_CHECK(
        kv.second.defined(),
        fn,
        "expected a defined tensor for \"",
        kv.first,
        "\", got an undefined one");
    at::Tensor t = kv.second.detach().to(at::kCPU).contiguous();
    const std::string dtype = safetensors_dtype_name(t.scalar_type());
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    header[kv.first] = {
        {"dtype", dtype},
        {"shape", t.sizes().vec()},
        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string text = header.dump();
  // Pad so the buffer starts 8-byte aligned (as the reference writer does).
  while ((text.size() % 8) != 0) {
    text.push_back(' ');
  }
  // Written under a temporary name beside `path` and renamed once complete,
  // so a write that fails midway (disk full) never leaves a truncated file
  // under the name a reader expects.
  const std::string partial =
      path + ".partial-" + std::to_string(static_cast<long>(::getpid()));
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  FRAMESHARD_TORCH_CHECK(out, fn, "cannot open ", partial, " for writing");
  const uint64_t n = text.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) {
    len_bytes[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  }
  out.write(reinterpret_cast<const char*>(len_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : data) {
    const auto bytes =
        static_cast<std::streamsize>(t.numel() * t.element_size());
    if (bytes > 0) {
      out.write(static_cast<const char*>(t.data_ptr()), bytes);
    }
  }
  out.flush();
  const bool written = out.good();
  out.close();
  std::error_code ec;
  if (written && !out.fail()) {
    std::filesystem::rename(partial, path, ec);
  }
  if (!written || out.fail() || ec) {
    std::filesystem::remove(partial, ec);
    FRAMESHARD_TORCH_CHECK(
        false,
        fn,
        "expected to write ",
        path,
        ", got a failed write (the partial file was removed)");
  }
}

}  // namespace models
}  // namespace frameshard
