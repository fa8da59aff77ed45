// The safetensors dtype table and the JSON header -> entries (see
// safetensors_detail.h).
#include "models/safetensors_detail.h"

#include "io/json_text.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <limits>
#include <utility>

namespace frameshard {
namespace models {
namespace detail {

namespace {

using json_detail::json_excerpt;
using nlohmann::json;
constexpr const char* kHeaderFn = "SafetensorsFile";

// An integer in [0, 2^63 - 1]: JSON unsigned numbers above that would wrap
// to negative int64_t values (and overflow the size arithmetic).
bool non_negative_integer(const json& j) {
  if (j.is_number_unsigned()) {
    return j.get<uint64_t>() <=
           static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  return j.is_number_integer() && j.get<int64_t>() >= 0;
}

// The "__metadata__" object: string -> string.
std::map<std::string, std::string> parse_metadata(
    const json& v, const std::string& path) {
  FRAMESHARD_TORCH_CHECK(
      v.is_object(),
      kHeaderFn,
      "expected \"__metadata__\" to be an object of strings in ",
      path,
      ", got ",
      v.type_name());
  std::map<std::string, std::string> out;
  for (auto m = v.begin(); m != v.end(); ++m) {
    FRAMESHARD_TORCH_CHECK(
        m.value().is_string(),
        kHeaderFn,
        "expected string values in \"__metadata__\" of ",
        path,
        ", got ",
        m.value().type_name(),
        " for \"",
        ::frameshard::detail::excerpt(m.key()),
        "\"");
    out[m.key()] = m.value().get<std::string>();
  }
  return out;
}

// One tensor's {"dtype", "shape", "data_offsets"}, checked on its own.
HeaderEntry parse_entry(
    const std::string& name, const json& v, const std::string& path) {
  auto bad = [&](const std::string& what, const std::string& got) {
    fail_entry(path, name, what, got);
  };
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    bad("an object with \"dtype\", \"shape\" and \"data_offsets\"",
        json_excerpt(v));
  }
  HeaderEntry h;
  SafetensorsEntry& e = h.entry;
  e.name = name;
  if (!v["dtype"].is_string()) {
    bad("a string \"dtype\"", json_excerpt(v["dtype"]));
  }
  e.dtype_name = v["dtype"].get<std::string>();
  h.bits = safetensors_dtype_bits(e.dtype_name);
  if (h.bits == 0) {
    bad("a safetensors dtype (F64, F32, F16, BF16, I64, I32, ...)",
        "\"" + e.dtype_name + "\"");
  }
  e.dtype = readable_dtype(e.dtype_name);
  const json& shape = v["shape"];
  if (!shape.is_array()) {
    bad("a \"shape\" list of non-negative integers", json_excerpt(shape));
  }
  // numel, refusing overflow (a corrupt shape must not wrap around).
  h.numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    if (!non_negative_integer(d)) {
      bad("a \"shape\" list of non-negative integers below 2^63",
          json_excerpt(shape));
    }
    const int64_t n = d.get<int64_t>();
    e.shape.push_back(n);
    // Once it would overflow, stop multiplying (the product is refused
    // below, as the reference implementation's checked product is, even
    // when a later dimension is 0); the rest are still checked.
    if (overflow ||
        (n != 0 && h.numel > std::numeric_limits<int64_t>::max() / 64 / n)) {
      overflow = true;
    } else {
      h.numel *= n;
    }
  }
  if (overflow) {
    bad("a shape whose byte size fits in 64 bits", json_excerpt(shape));
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !non_negative_integer(off[0]) ||
      !non_negative_integer(off[1])) {
    bad("\"data_offsets\" [begin, end] of non-negative integers below 2^63",
        json_excerpt(off));
  }
  e.begin = off[0].get<int64_t>();
  e.end = off[1].get<int64_t>();
  h.offsets_text = off.dump();
  return h;
}

}  // namespace

void check_little_endian() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  FRAMESHARD_TORCH_CHECK(
      first == 1,
      "safetensors",
      "expected a little-endian host, got a big-endian one");
}

int64_t safetensors_dtype_bits(const std::string& name) {
  static const std::map<std::string, int64_t> kBits = {
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32}, {"F32", 32}, {"C64", 64},    {"F64", 64},
      {"I64", 64},    {"U64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = kBits.find(name);
  return it == kBits.end() ? 0 : it->second;
}

at::ScalarType readable_dtype(const std::string& name) {
  static const std::map<std::string, at::ScalarType> kReadable = {
      {"F64", at::kDouble},
      {"F32", at::kFloat},
      {"F16", at::kHalf},
      {"BF16", at::kBFloat16},
      {"I64", at::kLong},
      {"I32", at::kInt}};
  auto it = kReadable.find(name);
  return it == kReadable.end() ? at::ScalarType::Undefined : it->second;
}

void fail_entry(
    const std::string& path,
    const std::string& name,
    const std::string& what,
    const std::string& got) {
  FRAMESHARD_TORCH_CHECK(
      false,
      kHeaderFn,
      "expected ",
      what,
      " for tensor \"",
      ::frameshard::detail::excerpt(name),
      "\" in ",
      path,
      ", got ",
      got);
}

SafetensorsHeader parse_safetensors_header(
    const std::string& text, const std::string& path) {
  json j;
  std::string problem;
  FRAMESHARD_TORCH_CHECK(
      json_detail::parse_json_strict(text, j, problem),
      kHeaderFn,
      "expected a JSON header in ",
      path,
      ", got ",
      problem);
  FRAMESHARD_TORCH_CHECK(
      j.is_object(),
      kHeaderFn,
      "expected a JSON object as the header of ",
      path,
      ", got ",
      j.type_name());
  SafetensorsHeader header;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      header.metadata = parse_metadata(it.value(), path);
    } else {
      header.entries.push_back(parse_entry(it.key(), it.value(), path));
    }
  }
  return header;
}

}  // namespace detail

// ------------------------------------------------------------- dtypes

at::ScalarType safetensors_dtype(const std::string& name) {
  const at::ScalarType t = detail::readable_dtype(name);
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

}  // namespace models
}  // namespace frameshard
