// !!! Internal header of frameshard::io, not installed. !!!
//
// The configuration's rule table: one Rule per leaf key of the YAML schema,
// saying how the key is read from YAML (type check, then value check) and
// how a value set from code is re-checked (validate()). config.cpp's schema
// walks files and dotted overrides through these rules, so each field is
// checked in exactly one place.
//
// Usage:
//   for (const Rule& r : config_rules()) {
//     if (r.path == path) r.read(node, path, config, source);
//   }
//   // validate(): r.check(config, r.path) for every rule
#pragma once

#include <frameshard/config.h>

#include "io/config_values.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace frameshard {
namespace config_detail {

struct Rule {
  std::string path;  // "distributed.cp_size"
  std::function<void(
      const YAML::Node&, const std::string&, Config&, const Source&)>
      read;
  std::function<void(const Config&, const std::string&)> check;
};

/// Every leaf of the schema, in declaration order (the order an unknown
/// key's error lists the known ones in).
std::vector<Rule> config_rules();

}  // namespace config_detail
}  // namespace frameshard
