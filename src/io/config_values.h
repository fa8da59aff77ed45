// !!! Internal header of frameshard::io, not installed. !!!
//
// The typed YAML readers and value checks of the configuration
// (config.cpp's rule table calls them): every error names the key path,
// what was expected, what was given and where (" (in train.yaml:7)").
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {
namespace config_detail {

// Where a value came from, appended to errors: " (in train.yaml:7)".
struct Source {
  std::string name;
  std::string at(const YAML::Node& n) const {
    if (name.empty()) {
      return "";
    }
    const YAML::Mark m = n.Mark();
    if (m.is_null() || m.line < 0) {
      return " (in " + name + ")";
    }
    return " (in " + name + ":" + std::to_string(m.line + 1) + ")";
  }
};

std::string quote(const std::string& s);

// A scalar written without quotes or an explicit tag: only those are read
// as integers, numbers or bools (a quoted "96" is a string).
bool is_plain_scalar(const YAML::Node& n);

// true/True/TRUE or false/False/FALSE (YAML 1.2 core schema).
bool is_yaml_bool(const std::string& s, bool* value);

// No upper bound for check_int / read_int.
constexpr int64_t kNoMax = INT64_MAX;

// "a non-negative integer", "a positive integer", "an integer >= 3",
// "an integer in [1, 65536]".
std::string int_expectation(int64_t min_value, int64_t max_value = kNoMax);

// The value as written, for the "got" part of an error; cut to
// detail::kMaxExcerptChars characters (load_yaml refuses aliases, so the
// tree is never larger than the text).
std::string render(const YAML::Node& n);

// YAML::Load of one document, refusing anchors and aliases (a
// self-referencing alias recurses forever, nested ones expand
// exponentially: "billion laughs"; the configuration never needs them) and
// a second document (YAML::Load would ignore it silently). `path` names the
// value in errors ("" for a whole file). Syntax errors propagate as
// YAML::ParserException.
YAML::Node load_yaml(
    const std::string& text, const std::string& path, const Source& src);

std::string join(const std::vector<std::string>& items);

[[noreturn]] void config_error(
    const std::string& path,
    const std::string& expected,
    const std::string& got,
    const std::string& where = "");

bool parse_int_literal(const std::string& s, int64_t* value);

void check_int(
    int64_t v,
    int64_t min_value,
    const std::string& path,
    const std::string& where = "",
    int64_t max_value = kNoMax);

int64_t read_int(
    const YAML::Node& n,
    int64_t min_value,
    const std::string& path,
    const Source& src,
    int64_t max_value = kNoMax);

bool read_bool(const YAML::Node& n, const std::string& path, const Source& s);

std::string read_string(
    const YAML::Node& n,
    const std::string& expected,
    const std::string& path,
    const Source& s);

/// What frame_sharding.mesh_dims may be.
inline constexpr const char* kMeshDimsExpectation = "[cp] or [dp, cp]";

void check_mesh_dims(
    const std::vector<std::string>& dims,
    const std::string& got,
    const std::string& path,
    const std::string& where = "");

std::string partitioner_expectation();

void check_partitioner(
    const std::string& name,
    const std::string& got,
    const std::string& path,
    const std::string& where = "");

void check_tower(
    const std::string& name,
    const std::string& got,
    const std::string& path,
    const std::string& where = "");

void check_cost_alpha(
    const std::string& spec,
    const std::string& tower,
    const std::string& got,
    const std::string& path,
    const std::string& where = "");

std::string read_cost_alpha(
    const YAML::Node& n,
    const std::string& tower,
    const std::string& path,
    const Source& s);

// The ranges a plain (unquoted) finite number key may take.
enum class NumberRange {
  kPositive,     // > 0, e.g. 25 or 12.5
  kFraction,     // in [0, 1), e.g. 0.05 or 0
  kNonNegative,  // >= 0, e.g. 50 or 0
};

// A plain finite number in `range`, else the config error naming it.
double read_number(
    const YAML::Node& n,
    NumberRange range,
    const std::string& path,
    const Source& s);

void check_number(
    double v,
    NumberRange range,
    const std::string& path,
    const std::string& where = "");

std::vector<std::string> read_mesh_dims(
    const YAML::Node& n, const std::string& path, const Source& s);

}  // namespace config_detail
}  // namespace frameshard
