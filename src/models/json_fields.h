// !!! Internal header of frameshard::models, not installed. !!!
//
// Typed config fields as a table: {json key, pointer to member, kind}. One
// table per config type (hf_config.cpp) drives both directions, so a field
// is listed once:
//   read_fields:  JSON object -> config; a missing or null field keeps the
//                 default (HF's), a wrongly typed or out-of-range one
//                 raises naming the field and the source;
//   write_fields: config -> JSON object, refusing values the reader would
//                 refuse (so what is written reads back equal).
//
// Usage:
//   const std::vector<Field<Cfg>> kFields = {
//       {"depth", &Cfg::depth, FieldKind::kInteger}};
//   FieldReader r(obj, "vision_config", "config.json", "parse_cfg");
//   read_fields(r, kFields, cfg, /*deepstack=*/true);
//   FieldWriter w(out, "vision_config", "cfg_json");
//   write_fields(w, kFields, cfg, /*deepstack=*/true);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace frameshard {
namespace models {
namespace detail {

enum class FieldKind {
  kInteger,    // an integer >= 1
  kCount,      // an integer >= 0 (RADIO's cls and register token counts)
  kSize,       // an integer >= 1, or a list of equal ones (patch sizes)
  kNumber,     // a positive number
  kString,     // a string
  kIndexList,  // a list of integers >= 0 (layer indexes)
  kRopeTheta,  // rope_parameters.rope_theta (or a flat rope_theta)
};

template <typename C>
using FieldMember = std::variant<
    int64_t C::*,
    double C::*,
    std::string C::*,
    std::vector<int64_t> C::*>;

template <typename C>
struct Field {
  const char* key;
  FieldMember<C> member;
  FieldKind kind;
  /// Only in model types with DeepStack: elsewhere read as empty and
  /// written only when empty (Qwen3.5 has the Qwen3-VL fields without it).
  bool deepstack = false;
};

/// Reads typed fields of one JSON object `obj` (named `where`, "" for the
/// top level) of the file `source`; errors are raised as `fn`.
class FieldReader {
 public:
  FieldReader(
      const nlohmann::json& obj,
      std::string where,
      std::string source,
      const char* fn);

  void read(const char* key, FieldKind kind, int64_t& out) const;
  void read(const char* key, FieldKind kind, double& out) const;
  void read(const char* key, FieldKind kind, std::string& out) const;
  void read(const char* key, FieldKind kind, std::vector<int64_t>& out) const;

 private:
  const nlohmann::json* find(const char* key) const;
  std::string name(const char* key) const;
  void integer(const char* key, FieldKind kind, int64_t& out) const;
  void size(const char* key, int64_t& out) const;
  void number(const char* key, double& out) const;
  void rope(double& theta) const;

  const nlohmann::json& obj_;
  std::string where_;
  std::string source_;
  const char* fn_;
};

/// Writes typed fields into the JSON object `out` (named `where`); errors
/// are raised as `fn`.
class FieldWriter {
 public:
  FieldWriter(nlohmann::json& out, std::string where, const char* fn);

  void write(const char* key, FieldKind kind, int64_t value);
  void write(const char* key, FieldKind kind, double value);
  void write(const char* key, FieldKind kind, const std::string& value);
  void write(
      const char* key, FieldKind kind, const std::vector<int64_t>& value);
  /// A DeepStack-only list outside a DeepStack model type: must be empty.
  void require_empty(const char* key, const std::vector<int64_t>& value) const;

 private:
  std::string name(const char* key) const;

  nlohmann::json& out_;
  std::string where_;
  const char* fn_;
};

/// Reads every field of `fields` into `c`; `deepstack`: whether the model
/// type has DeepStack (Field::deepstack).
template <typename C>
void read_fields(
    const FieldReader& reader,
    const std::vector<Field<C>>& fields,
    C& c,
    bool deepstack) {
  for (const Field<C>& f : fields) {
    if (f.deepstack && !deepstack) {
      (c.*std::get<std::vector<int64_t> C::*>(f.member)).clear();
      continue;
    }
    std::visit(
        [&](auto member) { reader.read(f.key, f.kind, c.*member); }, f.member);
  }
}

/// Writes every field of `fields` from `c` (see read_fields).
template <typename C>
void write_fields(
    FieldWriter& writer,
    const std::vector<Field<C>>& fields,
    const C& c,
    bool deepstack) {
  for (const Field<C>& f : fields) {
    if (f.deepstack && !deepstack) {
      writer.require_empty(
          f.key, c.*std::get<std::vector<int64_t> C::*>(f.member));
      continue;
    }
    std::visit(
        [&](auto member) { writer.write(f.key, f.kind, c.*member); }, f.member);
  }
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
