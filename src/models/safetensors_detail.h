// !!! Internal header of frameshard::models, not installed. !!!
//
// What the safetensors sources share (see frameshard/models/safetensors.h):
//   safetensors_header.cpp      dtype table; JSON header text -> entries
//   safetensors_file.cpp        a file: length prefix, layout checks, reads
//   safetensors_writer.cpp      save_safetensors
//   safetensors_checkpoint.cpp  one file or a sharded index
// The header parser checks each entry on its own (dtype, shape, offsets
// well-formed); where the entries lie in the byte buffer (in range, sized
// dtype x shape, tiling it) is the file's check, which knows the buffer.
#pragma once

#include <frameshard/models/safetensors.h>

#include "tower/check.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace detail {

/// Throws unless the host is little-endian (the format's byte order).
void check_little_endian();

/// Bits per element of every dtype the format defines (so files holding
/// dtypes we do not read still open); 0 for an unknown name.
int64_t safetensors_dtype_bits(const std::string& name);

/// The LibTorch dtype of a name frameshard reads, else Undefined.
at::ScalarType readable_dtype(const std::string& name);

/// One header entry with what the layout check needs.
struct HeaderEntry {
  SafetensorsEntry entry;
  int64_t numel = 0;
  int64_t bits = 0;          // per element
  std::string offsets_text;  // data_offsets as written, for messages
};

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<HeaderEntry> entries;  // in name order
};

/// Parses the JSON header of the file `path` (for messages). Every entry
/// is well-formed on return: a known dtype, a non-negative shape whose byte
/// size fits in 64 bits, offsets [begin, end] of non-negative integers.
SafetensorsHeader parse_safetensors_header(
    const std::string& text, const std::string& path);

/// Throws "SafetensorsFile: expected <what> for tensor "<name>" in <path>,
/// got <got>".
void fail_entry(
    const std::string& path,
    const std::string& name,
    const std::string& what,
    const std::string& got);

/// The keys of a name -> value map, sorted (the map's order).
template <typename V>
std::vector<std::string> keys_of(const std::map<std::string, V>& map) {
  std::vector<std::string> out;
  out.reserve(map.size());
  for (const auto& kv : map) {
    out.push_back(kv.first);
  }
  return out;
}

/// map[name], or the "expected a tensor named" error of `owner` (the
/// class) reading `source`.
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
      ::frameshard::detail::excerpt(name),
      "\" in ",
      source,
      ", got none");
  return it->second;
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
