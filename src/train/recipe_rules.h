// !!! Internal header of frameshard::train, not installed. !!!
//
// The rule table of a recipe's own sections (model, data, train; the
// `distributed` section belongs to frameshard/config.h): one rule per leaf
// says how to read it from YAML, how to re-check a value set from code and
// how to write it back, so parsing, overrides, validate() and to_yaml()
// cannot drift apart. Errors use core's typed readers and wording
// (io/config_values.h): "frameshard::config: model.text_layers: expected a
// positive integer, got -2 (in recipe.yaml:7)".
#pragma once

#include <frameshard/train/train_config.h>

#include "io/config_values.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace frameshard {
namespace train {
namespace recipe_detail {

struct RecipeRule {
  std::string path;  // "model.text_layers"
  std::function<void(
      const YAML::Node&,
      const std::string&,
      TrainConfig&,
      const config_detail::Source&)>
      read;
  std::function<void(const TrainConfig&, const std::string&)> check;
  // Writes "leaf: value" into an open block mapping.
  std::function<void(YAML::Emitter&, const TrainConfig&)> emit;
};

/// The recipe's sections besides `distributed`, in document order.
const std::vector<std::string>& recipe_sections();
/// Every leaf rule, section by section, in document order.
const std::vector<RecipeRule>& recipe_rules();
/// The rule of a full leaf path, or nullptr.
const RecipeRule* find_rule(const std::string& path);
/// The leaf names of one section, in document order ("tower, model_dir").
std::vector<std::string> section_keys(const std::string& section);

/// Applies one section's mapping (`node` at `section`) to `config`:
/// scalar, plain, unique, known keys, each read by its rule. A null node
/// keeps the defaults.
void apply_section(
    const YAML::Node& node,
    const std::string& section,
    TrainConfig& config,
    const config_detail::Source& src);

/// Rules between fields (head sizes, DeepStack depth).
void check_cross_fields(const TrainConfig& config);

}  // namespace recipe_detail
}  // namespace train
}  // namespace frameshard
