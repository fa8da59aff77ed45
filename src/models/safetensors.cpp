// safetensors reader and writer (see frameshard/models/safetensors.h).
#include <frameshard/models/safetensors.h>

#include "models/file_checks.h"
#include "tower/check.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

namespace frameshard {
namespace models {

namespace {

namespace fs = std::filesystem;

// The reference implementation refuses headers above 100 MB; so do we (a
// corrupt length must not make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

void check_little_endian() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  FRAMESHARD_TORCH_CHECK(
      first == 1,
      "safetensors",
      "expected a little-endian host, got a big-endian one");
}

// Bits per element of every dtype the format defines, so files holding
// dtypes we do not read (quantized language-model tensors) still open.
int64_t dtype_bits(const std::string& name) {
  static const std::map<std::string, int64_t> kBits = {
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32}, {"F32", 32}, {"C64", 64},    {"F64", 64},
      {"I64", 64},    {"U64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = kBits.find(name);
  return it == kBits.end() ? 0 : it->second;
}

at::ScalarType readable_dtype(const std::string& name) {
  if (name == "F64") {
    return at::kDouble;
  }
  if (name == "F32") {
    return at::kFloat;
  }
  if (name == "F16") {
    return at::kHalf;
  }
  if (name == "BF16") {
    return at::kBFloat16;
  }
  if (name == "I64") {
    return at::kLong;
  }
  if (name == "I32") {
    return at::kInt;
  }
  return at::ScalarType::Undefined;
}

int64_t file_size_of(const std::string& path, const char* fn) {
  detail::check_regular_file(path, fn);
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  FRAMESHARD_TORCH_CHECK(
      !ec, fn, "cannot read the size of ", path, ": ", ec.message());
  return static_cast<int64_t>(size);
}

// The keys of a name -> value map, sorted (the map's order).
template <typename V>
std::vector<std::string> keys_of(const std::map<std::string, V>& map) {
  std::vector<std::string> out;
  out.reserve(map.size());
  for (const auto& kv : map) {
    out.push_back(kv.first);
  }
  return out;
}

// map[name], or the "expected a tensor named" error of `owner` (the class)
// reading `source`.
template <typename V>
const V& find_tensor(
    const std::map<std::string, V>& map,
    const std::string& name,
    const char* owner,
    const std::string& source) {
  auto it = map.find(name);
  FRAMESHARD_TORCH_CHECK(
      it != map.end(),
      owner,
      "expected a tensor named \"",
      name,
      "\" in ",
      source,
      ", got none");
  return it->second;
}

bool non_negative_integer(const nlohmann::json& j) {
  return j.is_number_unsigned() ||
         (j.is_number_integer() && j.get<int64_t>() >= 0);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    os << (i ? ", " : "") << shape[i];
  }
  os << "]";
  return os.str();
}

}  // namespace

at::ScalarType safetensors_dtype(const std::string& name) {
  const at::ScalarType t = readable_dtype(name);
  FRAMESHARD_TORCH_CHECK(
      t != at::ScalarType::Undefined,
      "safetensors_dtype",
      "expected F64, F32, F16, BF16, I64 or I32, got \"",
      name,
      "\"");
  return t;
}

std::string safetensors_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return "F64";
    case at::kFloat:
      return "F32";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kLong:
      return "I64";
    case at::kInt:
      return "I32";
    default:
      break;
  }
  FRAMESHARD_TORCH_CHECK(
      false,
      "safetensors_dtype_name",
      "expected float64, float32, float16, bfloat16, int64 or int32, got ",
      dtype);
}

// ------------------------------------------------------------- reader

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  check_little_endian();
  const char* fn = "SafetensorsFile";
  const int64_t size = file_size_of(path_, fn);
  FRAMESHARD_TORCH_CHECK(
      size >= 8,
      "SafetensorsFile",
      "expected at least 8 bytes (the header length) in ",
      path_,
      ", got ",
      size);
  std::ifstream in(path_, std::ios::binary);
  FRAMESHARD_TORCH_CHECK(in, "SafetensorsFile", "cannot open ", path_);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | len_bytes[i];
  }
  FRAMESHARD_TORCH_CHECK(
      header_len <= kMaxHeaderBytes &&
          header_len <= static_cast<uint64_t>(size - 8),
      "SafetensorsFile",
      "expected a header length <= ",
      std::min<uint64_t>(kMaxHeaderBytes, static_cast<uint64_t>(size - 8)),
      " bytes in ",
      path_,
      " (file of ",
      size,
      " bytes), got ",
      header_len,
      " (not a safetensors file, or truncated)");
  std::string header(static_cast<size_t>(header_len), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  FRAMESHARD_TORCH_CHECK(
      in, "SafetensorsFile", "cannot read the header of ", path_);
  data_start_ = 8 + static_cast<int64_t>(header_len);
  const int64_t buffer_size = size - data_start_;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    FRAMESHARD_TORCH_CHECK(
        false,
        "SafetensorsFile",
        "expected a JSON header in ",
        path_,
        ", got a parse error: ",
        e.what());
  }
  FRAMESHARD_TORCH_CHECK(
      j.is_object(),
      "SafetensorsFile",
      "expected a JSON object as the header of ",
      path_,
      ", got ",
      j.type_name());

  std::vector<std::pair<int64_t, int64_t>> spans;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      FRAMESHARD_TORCH_CHECK(
          v.is_object(),
          "SafetensorsFile",
          "expected \"__metadata__\" to be an object of strings in ",
          path_,
          ", got ",
          v.type_name());
      for (auto m = v.begin(); m != v.end(); ++m) {
        FRAMESHARD_TORCH_CHECK(
            m.value().is_string(),
            "SafetensorsFile",
            "expected string values in \"__metadata__\" of ",
            path_,
            ", got ",
            m.value().type_name(),
            " for \"",
            m.key(),
            "\"");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what, const std::string& got) {
      FRAMESHARD_TORCH_CHECK(
          false,
          "SafetensorsFile",
          "expected ",
          what,
          " for tensor \"",
          name,
          "\" in ",
          path_,
          ", got ",
          got);
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      bad("an object with \"dtype\", \"shape\" and \"data_offsets\"", v.dump());
    }
    SafetensorsEntry e;
    e.name = name;
    if (!v["dtype"].is_string()) {
      bad("a string \"dtype\"", v["dtype"].dump());
    }
    e.dtype_name = v["dtype"].get<std::string>();
    const int64_t bits = dtype_bits(e.dtype_name);
    if (bits == 0) {
      bad("a safetensors dtype (F64, F32, F16, BF16, I64, I32, ...)",
          "\"" + e.dtype_name + "\"");
    }
    e.dtype = readable_dtype(e.dtype_name);
    const nlohmann::json& shape = v["shape"];
    if (!shape.is_array()) {
      bad("a \"shape\" list of non-negative integers", shape.dump());
    }
    // numel, refusing overflow (a corrupt shape must not wrap around).
    int64_t numel = 1;
    bool overflow = false;
    for (const auto& d : shape) {
      if (!non_negative_integer(d)) {
        bad("a \"shape\" list of non-negative integers", shape.dump());
      }
      const int64_t n = d.get<int64_t>();
      e.shape.push_back(n);
      if (n != 0 && numel > std::numeric_limits<int64_t>::max() / 64 / n) {
        overflow = true;
      }
      numel *= n;
    }
    if (overflow) {
      bad("a shape whose byte size fits in 64 bits", shape.dump());
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !non_negative_integer(off[0]) ||
        !non_negative_integer(off[1])) {
      bad("\"data_offsets\" [begin, end] of non-negative integers", off.dump());
    }
    e.begin = off[0].get<int64_t>();
    e.end = off[1].get<int64_t>();
    if (e.begin > e.end || e.end > buffer_size) {
      bad("0 <= begin <= end <= " + std::to_string(buffer_size) +
              " (the byte buffer)",
          off.dump());
    }
    if ((numel * bits) % 8 != 0 || e.end - e.begin != numel * bits / 8) {
      bad(std::to_string(numel) + " elements of " + e.dtype_name + " (" +
              std::to_string(numel * bits / 8) + " bytes) for shape " +
              shape_text(e.shape),
          std::to_string(e.end - e.begin) + " bytes at " + off.dump());
    }
    spans.emplace_back(e.begin, e.end);
    entries_.emplace(name, std::move(e));
  }
  // The tensors must tile the buffer exactly: no overlap, no gap, nothing
  // after the last one (what the reference implementation enforces).
  std::sort(spans.begin(), spans.end());
  int64_t at = 0;
  for (const auto& s : spans) {
    FRAMESHARD_TORCH_CHECK(
        s.first == at,
        "SafetensorsFile",
        "expected tensors that tile the byte buffer of ",
        path_,
        " without overlap or gap, got one starting at ",
        s.first,
        " where ",
        at,
        " was expected");
    at = s.second;
  }
  FRAMESHARD_TORCH_CHECK(
      at == buffer_size,
      "SafetensorsFile",
      "expected the tensors of ",
      path_,
      " to end at the end of the file (",
      buffer_size,
      " buffer bytes), got ",
      at,
      " (truncated or trailing data)");
}

std::vector<std::string> SafetensorsFile::names() const {
  return keys_of(entries_);
}

bool SafetensorsFile::contains(const std::string& name) const {
  return entries_.count(name) != 0;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  return find_tensor(entries_, name, "SafetensorsFile", path_);
}

at::Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  FRAMESHARD_TORCH_CHECK(
      e.dtype != at::ScalarType::Undefined,
      "SafetensorsFile::read",
      "expected tensor \"",
      name,
      "\" of ",
      path_,
      " in F64, F32, F16, BF16, I64 or I32, got ",
      e.dtype_name);
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  const int64_t bytes = e.end - e.begin;
  if (bytes > 0) {
    std::ifstream in(path_, std::ios::binary);
    FRAMESHARD_TORCH_CHECK(in, "SafetensorsFile::read", "cannot open ", path_);
    in.seekg(data_start_ + e.begin);
    in.read(
        static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
    FRAMESHARD_TORCH_CHECK(
        in && in.gcount() == bytes,
        "SafetensorsFile::read",
        "expected ",
        bytes,
        " bytes of tensor \"",
        name,
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

// ------------------------------------------------------------- writer

void save_safetensors(
    const std::string& path,
    const std::map<std::string, at::Tensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  check_little_endian();
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  std::vector<at::Tensor> data;
  int64_t offset = 0;
  for (const auto& kv : tensors) {
    FRAMESHARD_TORCH_CHECK(
        !kv.first.empty() && kv.first != "__metadata__",
        "save_safetensors",
        "expected tensor names other than \"\" and \"__metadata__\", got \"",
        kv.first,
        "\"");
    FRAMESHARD_TORCH_CHECK(
        kv.second.defined(),
        "save_safetensors",
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
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  FRAMESHARD_TORCH_CHECK(
      out, "save_safetensors", "cannot open ", path, " for writing");
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
  FRAMESHARD_TORCH_CHECK(
      out.good(), "save_safetensors", "failed writing ", path);
}

// --------------------------------------------------------- checkpoint

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  std::error_code ec;
  std::string source = path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      source = (dir / "model.safetensors.index.json").string();
    } else if (fs::exists(dir / "model.safetensors", ec)) {
      source = (dir / "model.safetensors").string();
    } else {
      FRAMESHARD_TORCH_CHECK(
          false,
          "SafetensorsCheckpoint::open",
          "expected model.safetensors or model.safetensors.index.json in ",
          path,
          ", got neither");
    }
  }
  SafetensorsCheckpoint ck;
  ck.source_ = source;
  const std::string suffix = ".index.json";
  const bool is_index =
      source.size() > suffix.size() &&
      source.compare(source.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (!is_index) {
    ck.files_.push_back(std::make_shared<SafetensorsFile>(source));
    for (const auto& name : ck.files_[0]->names()) {
      ck.where_[name] = 0;
    }
    return ck;
  }

  ck.sharded_ = true;
  file_size_of(source, "SafetensorsCheckpoint::open");
  std::ifstream in(source);
  FRAMESHARD_TORCH_CHECK(
      in, "SafetensorsCheckpoint::open", "cannot open ", source);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    FRAMESHARD_TORCH_CHECK(
        false,
        "SafetensorsCheckpoint::open",
        "expected JSON in ",
        source,
        ", got a parse error: ",
        e.what());
  }
  FRAMESHARD_TORCH_CHECK(
      j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
      "SafetensorsCheckpoint::open",
      "expected an object with a \"weight_map\" object in ",
      source,
      ", got ",
      j.is_object() ? "no \"weight_map\" object" : j.type_name());
  const fs::path dir = fs::path(source).parent_path();
  std::map<std::string, size_t> file_index;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    FRAMESHARD_TORCH_CHECK(
        it.value().is_string(),
        "SafetensorsCheckpoint::open",
        "expected a file name for \"",
        it.key(),
        "\" in the weight_map of ",
        source,
        ", got ",
        it.value().dump());
    const std::string file = it.value().get<std::string>();
    auto found = file_index.find(file);
    if (found == file_index.end()) {
      ck.files_.push_back(
          std::make_shared<SafetensorsFile>((dir / file).string()));
      found = file_index.emplace(file, ck.files_.size() - 1).first;
    }
    FRAMESHARD_TORCH_CHECK(
        ck.files_[found->second]->contains(it.key()),
        "SafetensorsCheckpoint::open",
        "expected tensor \"",
        it.key(),
        "\" in ",
        ck.files_[found->second]->path(),
        " (the weight_map of ",
        source,
        " says so), got no such tensor there");
    ck.where_[it.key()] = found->second;
  }
  return ck;
}

std::vector<std::string> SafetensorsCheckpoint::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) {
    out.push_back(f->path());
  }
  return out;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  return keys_of(where_);
}

bool SafetensorsCheckpoint::contains(const std::string& name) const {
  return where_.count(name) != 0;
}

const std::string& SafetensorsCheckpoint::file_of(
    const std::string& name) const {
  return files_[find_tensor(where_, name, "SafetensorsCheckpoint", source_)]
      ->path();
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(
    const std::string& name) const {
  return files_[find_tensor(where_, name, "SafetensorsCheckpoint", source_)]
      ->entry(name);
}

at::Tensor SafetensorsCheckpoint::read(const std::string& name) const {
  return files_[find_tensor(where_, name, "SafetensorsCheckpoint", source_)]
      ->read(name);
}

}  // namespace models
}  // namespace frameshard
