// The typed YAML readers and value checks of the configuration (see
// config_values.h).
#include "io/config_values.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>

#include <frameshard/config.h>
#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/partition.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <utility>

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

namespace {

// Appends `n` to `out` until `out` holds more than kMaxExcerptChars.
void render_into(const YAML::Node& n, std::string& out) {
  if (out.size() > detail::kMaxExcerptChars) {
    return;
  }
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out += "null";
      return;
    case YAML::NodeType::Scalar:
      out +=
          detail::excerpt(is_plain_scalar(n) ? n.Scalar() : quote(n.Scalar()));
      return;
    case YAML::NodeType::Sequence:
    case YAML::NodeType::Map: {
      const bool map = n.IsMap();
      out += map ? "{" : "[";
      bool first = true;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (out.size() > detail::kMaxExcerptChars) {
          break;
        }
        out += first ? "" : ", ";
        first = false;
        if (map) {
          render_into(it->first, out);
          out += ": ";
          render_into(it->second, out);
        } else {
          render_into(*it, out);
        }
      }
      out += map ? "}" : "]";
      return;
    }
  }
  out += "?";
}

// Refuses anchors, aliases and a second document while yaml-cpp parses.
class StrictEvents : public YAML::EventHandler {
 public:
  StrictEvents(std::string path, const Source& src)
      : path_(std::move(path)), src_(src) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      fail(mark, "one YAML document", "a second document");
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    check_anchor(mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    fail(mark, kExpected, "an alias (*name)");
  }
  void OnScalar(
      const YAML::Mark& mark,
      const std::string&,
      YAML::anchor_t anchor,
      const std::string&) override {
    check_anchor(mark, anchor);
  }
  void OnSequenceStart(
      const YAML::Mark& mark,
      const std::string&,
      YAML::anchor_t anchor,
      YAML::EmitterStyle::value) override {
    check_anchor(mark, anchor);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(
      const YAML::Mark& mark,
      const std::string&,
      YAML::anchor_t anchor,
      YAML::EmitterStyle::value) override {
    check_anchor(mark, anchor);
  }
  void OnMapEnd() override {}

 private:
  static constexpr const char* kExpected =
      "YAML without anchors or aliases (&name, *name)";

  void check_anchor(const YAML::Mark& mark, YAML::anchor_t anchor) const {
    if (anchor != YAML::NullAnchor) {
      fail(mark, kExpected, "an anchor (&name)");
    }
  }
  [[noreturn]] void fail(
      const YAML::Mark& mark,
      const std::string& expected,
      const std::string& got) const {
    const std::string where =
        src_.name.empty()
            ? ""
            : " (in " + src_.name + ":" + std::to_string(mark.line + 1) + ")";
    config_error(path_, expected, got, where);
  }

  std::string path_;
  const Source& src_;
  int documents_ = 0;
};

}  // namespace

// The value as the user wrote it, for the "got" part of an error:
// true, "96", 1.5, -1, [cp, tp], null.
std::string render(const YAML::Node& n) {
  std::string out;
  render_into(n, out);
  return detail::excerpt(out);
}

YAML::Node load_yaml(
    const std::string& text, const std::string& path, const Source& src) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  StrictEvents events(path, src);
  while (parser.HandleNextDocument(events)) {
  }
  return YAML::Load(text);
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
      path.empty() ? "(top level)" : detail::excerpt(path),
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

std::string int_expectation(int64_t min_value, int64_t max_value) {
  if (max_value != kNoMax) {
    return "an integer in [" + std::to_string(min_value) + ", " +
           std::to_string(max_value) + "]";
  }
  return min_value == 0   ? "a non-negative integer"
         : min_value == 1 ? "a positive integer"
                          : "an integer >= " + std::to_string(min_value);
}

void check_int(
    int64_t v,
    int64_t min_value,
    const std::string& path,
    const std::string& where,
    int64_t max_value) {
  if (v < min_value) {
    config_error(path, int_expectation(min_value), std::to_string(v), where);
  }
  if (v > max_value) {
    config_error(
        path, int_expectation(min_value, max_value), std::to_string(v), where);
  }
}

int64_t read_int(
    const YAML::Node& n,
    int64_t min_value,
    const std::string& path,
    const Source& src,
    int64_t max_value) {
  int64_t v = 0;
  if (!is_plain_scalar(n) || !parse_int_literal(n.Scalar(), &v)) {
    config_error(path, int_expectation(min_value), render(n), src.at(n));
  }
  check_int(v, min_value, path, src.at(n), max_value);
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
  // [dp, cp] balances vision over the whole data x context-parallel mesh
  // (frameshard/mesh_plan.h); dp outermost, as the mesh ranks are ordered.
  if (dims != std::vector<std::string>{"cp"} &&
      dims != std::vector<std::string>{"dp", "cp"}) {
    config_error(path, kMeshDimsExpectation, got, where);
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
  return "a non-negative integer, auto, online, a tower preset (" +
         join(tower_preset_names()) +
         "), automodel, automodel:<preset>, quadratic:a,b,c or the path of "
         "a frameshard calibrate file";
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
  } else if (
      spec == "auto" || spec == kOnlineCost || spec == "automodel" ||
      is_tower(spec)) {
    ok = true;
  } else if (spec.rfind("automodel:", 0) == 0) {
    ok = is_tower(spec.substr(10));
  } else if (spec.rfind("quadratic:", 0) == 0) {
    ok = true;
  } else if (is_calibration_path(spec)) {
    // The file's own error says what it holds; keep it whole.
    try {
      parse_cost_alpha(spec, "qwen3-vl", "cost_alpha");
      return;
    } catch (const Error& e) {
      config_error(
          path, cost_alpha_expectation(), got + " (" + e.what() + ")", where);
    }
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

namespace {

const char* number_expectation(NumberRange range) {
  switch (range) {
    case NumberRange::kPositive:
      return "a number > 0";
    case NumberRange::kFraction:
      return "a number in [0, 1)";
    case NumberRange::kNonNegative:
      break;
  }
  return "a number >= 0";
}

bool in_range(double v, NumberRange range) {
  if (!std::isfinite(v)) {
    return false;
  }
  switch (range) {
    case NumberRange::kPositive:
      return v > 0.0;
    case NumberRange::kFraction:
      return v >= 0.0 && v < 1.0;
    case NumberRange::kNonNegative:
      break;
  }
  return v >= 0.0;
}

}  // namespace

double read_number(
    const YAML::Node& n,
    NumberRange range,
    const std::string& path,
    const Source& s) {
  const char* expected = number_expectation(range);
  if (!n.IsScalar() || !is_plain_scalar(n)) {
    config_error(path, expected, render(n), s.at(n));
  }
  const std::string text = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 ||
      !in_range(v, range)) {
    config_error(path, expected, render(n), s.at(n));
  }
  return v;
}

void check_number(
    double v,
    NumberRange range,
    const std::string& path,
    const std::string& where) {
  if (!in_range(v, range)) {
    std::ostringstream got;
    got << v;
    config_error(path, number_expectation(range), got.str(), where);
  }
}

std::vector<std::string> read_mesh_dims(
    const YAML::Node& n, const std::string& path, const Source& s) {
  if (!n.IsSequence()) {
    config_error(path, "a list of mesh-dimension names", render(n), s.at(n));
  }
  std::vector<std::string> dims;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      config_error(path, kMeshDimsExpectation, render(n), s.at(n));
    }
    dims.push_back(n[i].Scalar());
  }
  check_mesh_dims(dims, render(n), path, s.at(n));
  return dims;
}

}  // namespace config_detail
}  // namespace frameshard
