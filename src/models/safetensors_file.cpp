// SafetensorsFile: the length prefix, the layout of the entries in the
// byte buffer, and tensor reads (see frameshard/models/safetensors.h).
#include "models/file_checks.h"
#include "models/safetensors_detail.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

namespace frameshard {
namespace models {

namespace {

constexpr const char* kFileFn = "SafetensorsFile";

// The reference implementation refuses headers above 100 MB; so do we (a
// corrupt length must not make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// At most the first kShownDims dimensions: a shape of 10^5 dimensions must
// not make a 10^5-number message.
std::string shape_text(const std::vector<int64_t>& shape) {
  constexpr size_t kShownDims = 8;
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size() && i < kShownDims; ++i) {
    os << (i ? ", " : "") << shape[i];
  }
  if (shape.size() > kShownDims) {
    os << ", ... (" << shape.size() << " dimensions)";
  }
  os << "]";
  return os.str();
}

// The JSON header text of the `size`-byte file `path` (after its 8-byte
// little-endian length).
std::string read_header_text(const std::string& path, int64_t size) {
  FRAMESHARD_TORCH_CHECK(
      size >= 8,
      kFileFn,
      "expected at least 8 bytes (the header length) in ",
      path,
      ", got ",
      size);
  std::ifstream in(path, std::ios::binary);
  FRAMESHARD_TORCH_CHECK(in, kFileFn, "cannot open ", path);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | len_bytes[i];
  }
  FRAMESHARD_TORCH_CHECK(
      header_len <= kMaxHeaderBytes &&
          header_len <= static_cast<uint64_t>(size - 8),
      kFileFn,
      "expected a header length <= ",
      std::min<uint64_t>(kMaxHeaderBytes, static_cast<uint64_t>(size - 8)),
      " bytes in ",
      path,
      " (file of ",
      size,
      " bytes), got ",
      header_len,
      " (not a safetensors file, or truncated)");
  std::string header(static_cast<size_t>(header_len), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  FRAMESHARD_TORCH_CHECK(in, kFileFn, "cannot read the header of ", path);
  return header;
}

// Each entry inside the buffer and sized dtype x shape; together they tile
// the buffer exactly: no overlap, no gap, nothing after the last one (what
// the reference implementation enforces).
void check_layout(
    const std::vector<detail::HeaderEntry>& entries,
    int64_t buffer_size,
    const std::string& path) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& h : entries) {
    const SafetensorsEntry& e = h.entry;
    if (e.begin > e.end || e.end > buffer_size) {
      detail::fail_entry(
          path,
          e.name,
          "0 <= begin <= end <= " + std::to_string(buffer_size) +
              " (the byte buffer)",
          h.offsets_text);
    }
    const int64_t bytes = h.numel * h.bits / 8;
    if ((h.numel * h.bits) % 8 != 0 || e.end - e.begin != bytes) {
      detail::fail_entry(
          path,
          e.name,
          std::to_string(h.numel) + " elements of " + e.dtype_name + " (" +
              std::to_string(bytes) + " bytes) for shape " +
              shape_text(e.shape),
          std::to_string(e.end - e.begin) + " bytes at " + h.offsets_text);
    }
    spans.emplace_back(e.begin, e.end);
  }
  std::sort(spans.begin(), spans.end());
  int64_t at = 0;
  for (const auto& s : spans) {
    FRAMESHARD_TORCH_CHECK(
        s.first == at,
        kFileFn,
        "expected tensors that tile the byte buffer of ",
        path,
        " without overlap or gap, got one starting at ",
        s.first,
        " where ",
        at,
        " was expected");
    at = s.second;
  }
  FRAMESHARD_TORCH_CHECK(
      at == buffer_size,
      kFileFn,
      "expected the tensors of ",
      path,
      " to end at the end of the file (",
      buffer_size,
      " buffer bytes), got ",
      at,
      " (truncated or trailing data)");
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  detail::check_little_endian();
  const int64_t size = detail::regular_file_size(path_, kFileFn);
  const std::string text = read_header_text(path_, size);
  data_start_ = 8 + static_cast<int64_t>(text.size());
  detail::SafetensorsHeader header =
      detail::parse_safetensors_header(text, path_);
  check_layout(header.entries, size - data_start_, path_);
  metadata_ = std::move(header.metadata);
  for (auto& h : header.entries) {
    entries_.emplace(h.entry.name, std::move(h.entry));
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  return detail::keys_of(entries_);
}

bool SafetensorsFile::contains(const std::string& name) const {
  return entries_.count(name) != 0;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  return detail::find_tensor(entries_, name, kFileFn, path_);
}

at::Tensor SafetensorsFile::read(const std::string& name) const {
  const char* fn = "SafetensorsFile::read";
  const SafetensorsEntry& e = entry(name);
  FRAMESHARD_TORCH_CHECK(
      e.dtype != at::ScalarType::Undefined,
      fn,
      "expected tensor \"",
      ::frameshard::detail::excerpt(name),
      "\" of ",
      path_,
      " in F64, F32, F16, BF16, I64 or I32, got ",
      e.dtype_name);
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  const int64_t bytes = e.end - e.begin;
  if (bytes > 0) {
    std::ifstream in(path_, std::ios::binary);
    FRAMESHARD_TORCH_CHECK(in, fn, "cannot open ", path_);
    in.seekg(data_start_ + e.begin);
    in.read(
        static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
    FRAMESHARD_TORCH_CHECK(
        in && in.gcount() == bytes,
        fn,
        "expected ",
        bytes,
        " bytes of tensor \"",
        ::frameshard::detail::excerpt(name),
        "\" in ",
        path_,
        ", got ",
        in.gcount(),
        " (the file changed or is truncated)");
  }
  return t;
}

std::map<std::string, at::Tensor> load_safetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  SafetensorsFile f(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& name : f.names()) {
    out.emplace(name, f.read(name));
  }
  if (metadata) {
    *metadata = f.metadata();
  }
  return out;
}

}  // namespace models
}  // namespace frameshard
