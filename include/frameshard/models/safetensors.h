// File: frameshard/models/safetensors.h
//
// Reading and writing the safetensors format (Hugging Face checkpoints and
// the inputs/outputs of `frameshard encode`):
//
//   [8 bytes: N, little-endian uint64][N bytes: JSON header][byte buffer]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the byte buffer) plus an optional
// "__metadata__" object of string -> string. Supported tensor dtypes: F64,
// F32, F16, BF16, I64, I32. Other standard dtypes (I8, U8, BOOL, F8_*, ...)
// may sit in a file that is opened -- their entries are validated -- but
// reading one is an error. A checkpoint is one `model.safetensors` or a
// sharded `model.safetensors.index.json` whose "weight_map" names the file
// of every tensor; tensors are read on demand (only the ones asked for).
//
// Opening validates the whole header: sizes, JSON, dtypes, shapes, offsets
// that lie inside the buffer, match numel * element size and cover it
// without overlap or gap (the rules of the reference implementation). Every
// error names the file and says what was expected and what was found.
//
// Usage:
//   frameshard::models::save_safetensors(
//       "out.safetensors", {{"embeddings", emb}}, {{"format", "pt"}});
//   frameshard::models::SafetensorsFile f("out.safetensors");
//   at::Tensor emb = f.read("embeddings");
//   auto ckpt = frameshard::models::SafetensorsCheckpoint::open(model_dir);
//   at::Tensor w = ckpt.read("model.visual.patch_embed.proj.weight");
//
// Host byte order must be little-endian (checked). Objects are immutable
// after construction; concurrent reads of one object are safe.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace models {

/// One tensor of a safetensors header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;  // as stored: "F32", "BF16", ...
  /// The LibTorch dtype; at::ScalarType::Undefined for a dtype frameshard
  /// does not read (I8, U8, BOOL, F8_*, ...).
  at::ScalarType dtype = at::ScalarType::Undefined;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // data_offsets, relative to the byte buffer
  int64_t end = 0;
};

/// A safetensors file opened for reading. The header is parsed and
/// validated by the constructor; tensor data is read by read().
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);

  const std::string& path() const {
    return path_;
  }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// Throws naming the file if `name` is absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// A new contiguous CPU tensor of the stored dtype and shape.
  at::Tensor read(const std::string& name) const;

 private:
  std::string path_;
  int64_t data_start_ = 0;  // file offset of the byte buffer
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsEntry> entries_;
};

/// Every tensor of one file (CPU, stored dtypes); `metadata` receives the
/// "__metadata__" object when given.
std::map<std::string, at::Tensor> load_safetensors(
    const std::string& path,
    std::map<std::string, std::string>* metadata = nullptr);

/// Writes `tensors` (any device; dtypes F64, F32, F16, BF16, I64, I32) in
/// name order, the header padded with spaces to a multiple of 8 bytes (as
/// the reference writer does). Overwrites `path`.
void save_safetensors(
    const std::string& path,
    const std::map<std::string, at::Tensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

/// A Hugging Face checkpoint: one safetensors file or a sharded index.
class SafetensorsCheckpoint {
 public:
  /// `path`: a directory (its model.safetensors.index.json if present, else
  /// its model.safetensors), an index file (*.index.json) or a single
  /// .safetensors file. Each shard's header is validated on open, and every
  /// tensor the index names must be in the shard it names.
  static SafetensorsCheckpoint open(const std::string& path);

  /// What was opened: the index file, or the single file.
  const std::string& source() const {
    return source_;
  }
  bool sharded() const {
    return sharded_;
  }
  /// Files in the checkpoint, in index order (one when not sharded).
  std::vector<std::string> files() const;
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  /// The file holding `name`.
  const std::string& file_of(const std::string& name) const;
  at::Tensor read(const std::string& name) const;

 private:
  std::string source_;
  bool sharded_ = false;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // name -> index into files_
};

/// "F32" <-> at::kFloat etc. for the supported dtypes; throws for others.
at::ScalarType safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(at::ScalarType dtype);

}  // namespace models
}  // namespace frameshard
