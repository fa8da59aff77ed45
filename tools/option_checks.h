// CLI11 checks shared by the commands' options, so a bad value is a usage
// error (exit 2) at parse time instead of a silent fallback:
//   non_empty()         --cp "" / --alpha "" would otherwise read as unset
//   partitioner_name()  one of frameshard's partitioners
//   floor_rows()        --min-local-patch-rows in [0, kMaxMinLocalPatchRows]
//                       (a negative value used to mean "the default")
//
// Usage:
//   cmd->add_option("--partitioner", a.partitioner)->check(partitioner_name());
#pragma once

#include <frameshard/partition.h>
#include <frameshard/plan.h>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace frameshard {
namespace cli {

inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& value) {
        return value.empty() ? std::string("expected a value, got \"\"")
                             : std::string();
      },
      "NOT EMPTY");
}

inline CLI::Validator partitioner_name() {
  std::vector<std::string> names;
  for (Partitioner p : all_partitioners()) {
    names.push_back(to_string(p));
  }
  return CLI::IsMember(names);
}

inline CLI::Validator floor_rows() {
  return CLI::Range(int64_t{0}, kMaxMinLocalPatchRows);
}

}  // namespace cli
}  // namespace frameshard
