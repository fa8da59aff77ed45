// The typed YAML readers and value checks of the configuration (see
// config_values.h).
#include "core/config_values.h"

#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/partition.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>

namespace frameshard {
namespace config_detail {
// ------------------------------------------------------------ rendering

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
    }
    out += ch;
  }
  return out + "\"";
}

// A plain scalar is one written without quotes or an explicit tag: only
// those are read as integers or bools (a quoted "96" is a string).
bool is_plain_scalar(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() == "?";
}

// The value as the user wrote it, for the "got" part of an error:
// true, "96", 1.5, -1, [cp, tp], null.
std::string render(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "null";
    case YAML::NodeType::Scalar:
      return is_plain_scalar(n) ? n.Scalar() : quote(n.Scalar());
    case YAML::NodeType::Sequence: {
      std::string out = "[";
      for (std::size_t i = 0; i < n.size(); ++i) {
        out += (i ? ", " : "") + render(n[i]);
      }
      return out + "]";
    }
    case YAML::NodeType::Map: {
      std::string out = "{";
      bool first = true;
      for (auto it = n.begin(); it != n.end(); ++it) {
        out +=
            (first ? "" : ", ") + render(it->first) + ": " + render(it->second);
        first = false;
      }
      return out + "}";
    }
  }
  return "?";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += (i ? ", " : "") + items[i];
  }
  return out;
}

[[noreturn]] void config_error(
    const std::string& path,
    const std::string& expected,
    const std::string& got,
    const std::string& where) {
  detail::fail(
      "config",
      path.empty() ? "(top level)" : path,
      ": expected ",
      expected,
      ", got ",
      got,
      where);
}

// ------------------------------------------------------- typed readers

bool is_yaml_bool(const std::string& s, bool* value) {
  static const std::set<std::string> kTrue{"true", "True", "TRUE"};
  static const std::set<std::string> kFalse{"false", "False", "FALSE"};
  if (kTrue.count(s)) {
    *value = true;
    return true;
  }
  if (kFalse.count(s)) {
    *value = false;
    return true;
  }
  return false;
}

// Decimal integer literal ([+-]digits) that fits in int64.
bool parse_int_literal(const std::string& s, int64_t* value) {
  std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) {
    return false;
  }
  for (std::size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') {
      return false;
    }
  }
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) {
    return false;
  }
  *value = static_cast<int64_t>(v);
  return true;
}

std::string int_expectation(int64_t min_value) {
  return min_value == 0   ? "a non-negative integer"
         : min_value == 1 ? "a positive integer"
                          : "an integer >= " + std::to_string(min_value);
}

void check_int(
    int64_t v,
    int64_t min_value,
    const std::string& path,
    const std::string& where) {
  if (v < min_value) {
    config_error(path, int_expectation(min_value), std::to_string(v), where);
  }
}

int64_t read_int(
    const YAML::Node& n,
    int64_t min_value,
    const std::string& path,
    const Source& src) {
  int64_t v = 0;
  if (!is_plain_scalar(n) || !parse_int_literal(n.Scalar(), &v)) {
    config_error(path, int_expectation(min_value), render(n), src.at(n));
  }
  check_int(v, min_value, path, src.at(n));
  return v;
}

bool read_bool(const YAML::Node& n, const std::string& path, const Source& s) {
  bool v = false;
  if (!is_plain_scalar(n) || !is_yaml_bool(n.Scalar(), &v)) {
    config_error(path, "a bool (true or false)", render(n), s.at(n));
  }
  return v;
}

std::string read_string(
    const YAML::Node& n,
    const std::string& expected,
    const std::string& path,
    const Source& s) {
  if (!n.IsScalar()) {
    config_error(path, expected, render(n), s.at(n));
  }
  return n.Scalar();
}

// ------------------------------------------------------ value checks

void check_mesh_dims(
    const std::vector<std::string>& dims,
    const std::string& got,
    const std::string& path,
    const std::string& where) {
  if (dims != std::vector<std::string>{"cp"}) {
    config_error(path, "[cp] (only cp is supported)", got, where);
  }
}

std::string partitioner_expectation() {
  std::vector<std::string> names;
  for (Partitioner p : all_partitioners()) {
    names.push_back(to_string(p));
  }
  return "one of " + join(names);
}

void check_partitioner(
    const std::string& name,
    const std::string& got,
    const std::string& path,
    const std::string& where) {
  for (Partitioner p : all_partitioners()) {
    if (to_string(p) == name) {
      return;
    }
  }
  config_error(path, partitioner_expectation(), got, where);
}

bool is_tower(const std::string& name) {
  const auto names = tower_preset_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

void check_tower(
    const std::string& name,
    const std::string& got,
    const std::string& path,
    const std::string& where) {
  if (!is_tower(name)) {
    config_error(
        path,
        "a tower preset (" + join(tower_preset_names()) + ")",
        got,
        where);
  }
}

std::string cost_alpha_expectation() {
  return "a non-negative integer, auto, a tower preset (" +
         join(tower_preset_names()) +
         "), automodel, automodel:<preset> or quadratic:a,b,c";
}

// The spellings parse_cost_alpha understands, matched exactly here so the
// config stays strict ("AUTO" is rejected) whatever the parser tolerates;
// parse_cost_alpha then checks the details (the quadratic coefficients).
void check_cost_alpha(
    const std::string& spec,
    const std::string& tower,
    const std::string& got,
    const std::string& path,
    const std::string& where) {
  int64_t n = 0;
  bool ok = false;
  if (parse_int_literal(spec, &n)) {
    ok = n >= 0 && spec[0] != '+';
  } else if (spec == "auto" || spec == "automodel" || is_tower(spec)) {
    ok = true;
  } else if (spec.rfind("automodel:", 0) == 0) {
    ok = is_tower(spec.substr(10));
  } else if (spec.rfind("quadratic:", 0) == 0) {
    ok = true;
  }
  if (ok) {
    try {
      parse_cost_alpha(
          spec, is_tower(tower) ? tower : "qwen3-vl", "cost_alpha");
    } catch (const Error&) {
      ok = false;
    }
  }
  if (!ok) {
    config_error(path, cost_alpha_expectation(), got, where);
  }
}

std::string read_cost_alpha(
    const YAML::Node& n,
    const std::string& tower,
    const std::string& path,
    const Source& s) {
  if (n.IsNull()) {
    return "auto";  // Automodel's legacy alias: None means auto
  }
  if (!n.IsScalar()) {
    config_error(path, cost_alpha_expectation(), render(n), s.at(n));
  }
  const std::string text = n.Scalar();
  int64_t v = 0;
  bool b = false;
  if (is_plain_scalar(n)) {
    if (parse_int_literal(text, &v)) {
      if (v < 0) {
        config_error(path, cost_alpha_expectation(), render(n), s.at(n));
      }
      return std::to_string(v);
    }
    if (is_yaml_bool(text, &b)) {
      config_error(path, cost_alpha_expectation(), render(n), s.at(n));
    }
  } else if (parse_int_literal(text, &v)) {
    // A quoted number is a string: integers must be written as integers.
    config_error(path, cost_alpha_expectation(), render(n), s.at(n));
  }
  check_cost_alpha(text, tower, render(n), path, s.at(n));
  return text;
}

std::vector<std::string> read_mesh_dims(
    const YAML::Node& n, const std::string& path, const Source& s) {
  if (!n.IsSequence()) {
    config_error(path, "a list of mesh-dimension names", render(n), s.at(n));
  }
  std::vector<std::string> dims;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      config_error(path, "[cp] (only cp is supported)", render(n), s.at(n));
    }
    dims.push_back(n[i].Scalar());
  }
  check_mesh_dims(dims, render(n), path, s.at(n));
  return dims;
}

}  // namespace config_detail
}  // namespace frameshard
