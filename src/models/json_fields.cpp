// Typed config fields read from and written to JSON (see json_fields.h).
#include "models/json_fields.h"

#include <frameshard/models/hf_config.h>

#include "io/json_text.h"
#include "tower/check.h"

#include <cmath>
#include <utility>

namespace frameshard {
namespace models {
namespace detail {

namespace {

using nlohmann::json;

using json_detail::json_excerpt;

// The rules both directions share. The upper bounds keep a hostile
// config.json from sizing the tower (hf_config.h).
int64_t integer_limit(const char* key) {
  const std::string k(key);
  return k == "depth" || k == "num_hidden_layers" ? kMaxVisionDepth
                                                  : kMaxVisionInteger;
}
// kCount fields (prefix token counts) may be 0, the others not.
int64_t integer_floor(FieldKind kind) {
  return kind == FieldKind::kCount ? 0 : 1;
}
bool valid_integer(int64_t v, const char* key, FieldKind kind) {
  return v >= integer_floor(kind) && v <= integer_limit(key);
}
std::string integer_rule(const char* key, FieldKind kind) {
  return "an integer in [" + std::to_string(integer_floor(kind)) + ", " +
         std::to_string(integer_limit(key)) + "]";
}
bool valid_number(double v, const char* key) {
  // Non-finite numbers have no JSON form (they would be written as null);
  // rope_theta is a base, not a size.
  const bool sized = std::string(key) == "mlp_ratio";
  return std::isfinite(v) && v > 0 &&
         (!sized || v <= static_cast<double>(kMaxVisionInteger));
}
bool valid_index(int64_t v) {
  return v >= 0;
}

std::string dotted(const std::string& where, const char* key) {
  return where.empty() ? std::string(key) : where + "." + key;
}

// A table pairing a member with a kind of another type is a bug here.
void check_kind(bool ok, const char* fn, const std::string& name) {
  FRAMESHARD_TORCH_CHECK(
      ok,
      fn,
      "expected a field kind matching the member type of ",
      name,
      ", got another (a field table error)");
}

bool integer_kind(FieldKind kind) {
  return kind == FieldKind::kInteger || kind == FieldKind::kSize ||
         kind == FieldKind::kCount;
}
bool number_kind(FieldKind kind) {
  return kind == FieldKind::kNumber || kind == FieldKind::kRopeTheta;
}

}  // namespace

// ------------------------------------------------------------- reading

FieldReader::FieldReader(
    const json& obj, std::string where, std::string source, const char* fn)
    : obj_(obj),
      where_(std::move(where)),
      source_(std::move(source)),
      fn_(fn) {}

const json* FieldReader::find(const char* key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

std::string FieldReader::name(const char* key) const {
  return dotted(where_, key);
}

void FieldReader::read(const char* key, FieldKind kind, int64_t& out) const {
  check_kind(integer_kind(kind), fn_, name(key));
  if (kind == FieldKind::kSize) {
    size(key, out);
  } else {
    integer(key, kind, out);
  }
}

void FieldReader::read(const char* key, FieldKind kind, double& out) const {
  check_kind(number_kind(kind), fn_, name(key));
  if (kind == FieldKind::kRopeTheta) {
    rope(out);
  } else {
    number(key, out);
  }
}

void FieldReader::read(
    const char* key, FieldKind kind, std::string& out) const {
  check_kind(kind == FieldKind::kString, fn_, name(key));
  const json* v = find(key);
  if (!v) {
    return;
  }
  FRAMESHARD_TORCH_CHECK(
      v->is_string(),
      fn_,
      "expected ",
      name(key),
      " to be a string in ",
      source_,
      ", got ",
      json_excerpt(*v));
  out = v->get<std::string>();
}

void FieldReader::read(
    const char* key, FieldKind kind, std::vector<int64_t>& out) const {
  check_kind(kind == FieldKind::kIndexList, fn_, name(key));
  const json* v = find(key);
  if (!v) {
    return;
  }
  bool ok = v->is_array();
  std::vector<int64_t> values;
  for (size_t i = 0; ok && i < v->size(); ++i) {
    ok = (*v)[i].is_number_integer() && valid_index((*v)[i].get<int64_t>());
    if (ok) {
      values.push_back((*v)[i].get<int64_t>());
    }
  }
  FRAMESHARD_TORCH_CHECK(
      ok,
      fn_,
      "expected ",
      name(key),
      " to be a list of non-negative integers in ",
      source_,
      ", got ",
      json_excerpt(*v));
  out = values;
}

void FieldReader::integer(const char* key, FieldKind kind, int64_t& out) const {
  const json* v = find(key);
  if (!v) {
    return;
  }
  FRAMESHARD_TORCH_CHECK(
      v->is_number_integer() && valid_integer(v->get<int64_t>(), key, kind),
      fn_,
      "expected ",
      name(key),
      " to be ",
      integer_rule(key, kind),
      " in ",
      source_,
      ", got ",
      json_excerpt(*v));
  out = v->get<int64_t>();
}

void FieldReader::size(const char* key, int64_t& out) const {
  const json* v = find(key);
  if (!v || !v->is_array()) {
    integer(key, FieldKind::kSize, out);
    return;
  }
  bool ok = !v->empty();
  for (size_t i = 0; ok && i < v->size(); ++i) {
    ok = (*v)[i].is_number_integer() && (*v)[i] == (*v)[0] &&
         valid_integer((*v)[i].get<int64_t>(), key, FieldKind::kSize);
  }
  FRAMESHARD_TORCH_CHECK(
      ok,
      fn_,
      "expected ",
      name(key),
      " to be ",
      integer_rule(key, FieldKind::kSize),
      " or a list of equal ones in ",
      source_,
      ", got ",
      json_excerpt(*v));
  out = (*v)[0].get<int64_t>();
}

void FieldReader::number(const char* key, double& out) const {
  const json* v = find(key);
  if (!v) {
    return;
  }
  FRAMESHARD_TORCH_CHECK(
      v->is_number() && valid_number(v->get<double>(), key),
      fn_,
      "expected ",
      name(key),
      " to be a positive number",
      std::string(key) == "mlp_ratio" ? " <= 65536" : "",
      " in ",
      source_,
      ", got ",
      json_excerpt(*v));
  out = v->get<double>();
}

// rope_parameters.rope_theta (or a flat rope_theta); the vision rotary is
// HF's "axial" type.
void FieldReader::rope(double& theta) const {
  number("rope_theta", theta);
  const json* r = find("rope_parameters");
  if (!r) {
    return;
  }
  FRAMESHARD_TORCH_CHECK(
      r->is_object(),
      fn_,
      "expected ",
      name("rope_parameters"),
      " to be an object in ",
      source_,
      ", got ",
      json_excerpt(*r));
  FieldReader rr(*r, name("rope_parameters"), source_, fn_);
  rr.number("rope_theta", theta);
  std::string type = "axial";
  rr.read("rope_type", FieldKind::kString, type);
  FRAMESHARD_TORCH_CHECK(
      type == "axial" || type == "default",
      fn_,
      "expected ",
      name("rope_parameters"),
      ".rope_type \"axial\" in ",
      source_,
      ", got \"",
      type,
      "\"");
}

// ------------------------------------------------------------- writing

FieldWriter::FieldWriter(json& out, std::string where, const char* fn)
    : out_(out), where_(std::move(where)), fn_(fn) {}

std::string FieldWriter::name(const char* key) const {
  return dotted(where_, key);
}

void FieldWriter::write(const char* key, FieldKind kind, int64_t value) {
  check_kind(integer_kind(kind), fn_, name(key));
  FRAMESHARD_TORCH_CHECK(
      valid_integer(value, key, kind),
      fn_,
      "expected ",
      name(key),
      " to be ",
      integer_rule(key, kind),
      ", got ",
      value);
  out_[key] = value;
}

void FieldWriter::write(const char* key, FieldKind kind, double value) {
  check_kind(number_kind(kind), fn_, name(key));
  const bool rope = kind == FieldKind::kRopeTheta;
  FRAMESHARD_TORCH_CHECK(
      valid_number(value, key),
      fn_,
      "expected ",
      rope ? name("rope_parameters") + ".rope_theta" : name(key),
      " to be a positive number, got ",
      value);
  if (rope) {
    // transformers >= 5 writes rope_parameters (the reader takes both).
    out_["rope_parameters"] = {{"rope_theta", value}, {"rope_type", "axial"}};
  } else {
    out_[key] = value;
  }
}

void FieldWriter::write(
    const char* key, FieldKind kind, const std::string& value) {
  check_kind(kind == FieldKind::kString, fn_, name(key));
  out_[key] = value;
}

void FieldWriter::write(
    const char* key, FieldKind kind, const std::vector<int64_t>& value) {
  check_kind(kind == FieldKind::kIndexList, fn_, name(key));
  for (int64_t v : value) {
    FRAMESHARD_TORCH_CHECK(
        valid_index(v),
        fn_,
        "expected ",
        name(key),
        " to be a list of non-negative integers, got an entry ",
        v);
  }
  out_[key] = value;
}

void FieldWriter::require_empty(
    const char* key, const std::vector<int64_t>& value) const {
  FRAMESHARD_TORCH_CHECK(
      value.empty(),
      fn_,
      "expected ",
      name(key),
      " to be empty (this model_type has no DeepStack), got ",
      value.size(),
      " indexes");
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
