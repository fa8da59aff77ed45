// The training recipe (train_config.h): `distributed` is parsed by
// frameshard::parse_config / apply_override (one wording for every error),
// model, data and train by the rule table of recipe_rules.h.
//
// The cost model's tower: frame_sharding.tower names the tower whose FLOPs
// cost_alpha "auto" counts. A recipe trains model.tower, so when the recipe
// does not set frame_sharding.tower it follows model.tower (a qwen2.5-vl
// recipe plans with window attention counted); an explicit value wins. An
// override of model.tower carries a following frame_sharding.tower along.
#include <frameshard/train/train_config.h>

#include <frameshard/error.h>

#include "train/recipe_rules.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

namespace frameshard {
namespace train {
namespace {

using config_detail::config_error;
using config_detail::join;
using config_detail::quote;
using config_detail::Source;
using recipe_detail::recipe_sections;

// Whether the document sets distributed.multimodal.vision.frame_sharding.
// tower (parse_config has already checked that the sections are mappings).
bool sets_cost_tower(const YAML::Node& node, std::size_t depth = 0) {
  static const char* kPath[] = {
      "distributed", "multimodal", "vision", "frame_sharding", "tower"};
  if (depth == 5) {
    return true;
  }
  if (!node.IsMap()) {
    return false;
  }
  const YAML::Node child = node[kPath[depth]];
  return child.IsDefined() && sets_cost_tower(child, depth + 1);
}

bool is_section(const std::string& name) {
  for (const std::string& s : recipe_sections()) {
    if (s == name) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> top_level_keys() {
  std::vector<std::string> keys{"distributed"};
  keys.insert(keys.end(), recipe_sections().begin(), recipe_sections().end());
  return keys;
}

YAML::Node load_value(const std::string& dotted_key, const std::string& value) {
  try {
    return config_detail::load_yaml(value, dotted_key, Source{});
  } catch (const YAML::ParserException& e) {
    config_error(dotted_key, "a YAML value", quote(value) + " (" + e.msg + ")");
  }
}

// A model.*, data.* or train.* override (`section` is its first component).
void apply_section_override(
    TrainConfig& config,
    const std::string& section,
    const std::string& dotted_key,
    const std::string& value) {
  if (dotted_key == section) {  // a whole section: "{text_layers: 3}"
    recipe_detail::apply_section(
        load_value(dotted_key, value), section, config, Source{});
    return;
  }
  const std::string rest = dotted_key.substr(section.size() + 1);
  const std::string leaf = rest.substr(0, rest.find('.'));
  const std::string path = section + "." + leaf;
  const recipe_detail::RecipeRule* rule = recipe_detail::find_rule(path);
  if (leaf.empty()) {
    config_error(
        dotted_key, "a dotted key such as train.steps", quote(dotted_key));
  }
  if (rule == nullptr) {
    config_error(
        path,
        "a known key under " + section + " (" +
            join(recipe_detail::section_keys(section)) + ")",
        "unknown key " + leaf);
  }
  if (path != dotted_key) {
    config_error(
        dotted_key,
        "a key that ends at a value (" + path + " has no sub-keys)",
        "unknown key " + rest.substr(leaf.size() + 1));
  }
  rule->read(load_value(dotted_key, value), dotted_key, config, Source{});
}

}  // namespace

TrainConfig parse_train_config(
    const std::string& yaml, const std::string& source) {
  TrainConfig config;
  // Syntax errors, the top-level keys and `distributed`: core's wording.
  config.parallel = parse_config(yaml, source, recipe_sections());
  // parse_config above already refused aliases and a second document.
  const YAML::Node root = YAML::Load(yaml);
  const Source src{source};
  if (root.IsMap()) {
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (is_section(key)) {
        recipe_detail::apply_section(it->second, key, config, src);
      }
    }
  }
  if (!sets_cost_tower(root)) {
    config.parallel.frame_sharding.tower = config.model.tower;
  }
  validate(config);
  return config;
}

TrainConfig load_train_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FRAMESHARD_CHECK(
      in.good(),
      "config",
      "expected a readable YAML recipe, got ",
      path,
      " (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  TrainConfig config = parse_train_config(text.str(), path);
  // A recipe names its manifest and checkpoint relative to itself, so it
  // runs from any directory (examples/recipes/shapes.jsonl next to it).
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (std::string* p : {&config.data.manifest, &config.model.model_dir}) {
    if (!p->empty() && std::filesystem::path(*p).is_relative()) {
      *p = (dir / *p).lexically_normal().string();
    }
  }
  return config;
}

void apply_train_override(
    TrainConfig& config,
    const std::string& dotted_key,
    const std::string& value) {
  const std::string head = dotted_key.substr(0, dotted_key.find('.'));
  TrainConfig updated = config;
  if (head == "distributed") {
    apply_override(updated.parallel, dotted_key, value);
  } else if (is_section(head)) {
    apply_section_override(updated, head, dotted_key, value);
    const std::string& cost_tower = config.parallel.frame_sharding.tower;
    if (cost_tower == config.model.tower) {
      updated.parallel.frame_sharding.tower = updated.model.tower;
    }
  } else if (head.empty()) {
    config_error(
        dotted_key.empty() ? "(override)" : dotted_key,
        "a dotted key such as train.steps",
        quote(dotted_key));
  } else {
    config_error(
        head,
        "a known key under the top level (" + join(top_level_keys()) + ")",
        "unknown key " + head);
  }
  validate(updated);
  config = std::move(updated);
}

void validate(const TrainConfig& config) {
  frameshard::validate(config.parallel);
  for (const recipe_detail::RecipeRule& r : recipe_detail::recipe_rules()) {
    r.check(config, r.path);
  }
  recipe_detail::check_cross_fields(config);
}

std::string to_yaml(const TrainConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const std::string& section : recipe_sections()) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (const recipe_detail::RecipeRule& r : recipe_detail::recipe_rules()) {
      if (r.path.compare(0, section.size() + 1, section + ".") == 0) {
        out << YAML::Key << r.path.substr(section.size() + 1) << YAML::Value;
        r.emit(out, config);
      }
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return frameshard::to_yaml(config.parallel) + out.c_str() + "\n";
}

namespace {

PlanOptions arm_options(
    const TrainConfig& config, bool sharded, PlanOptions o) {
  if (!sharded) {
    o.policy.enabled = false;
    return o;
  }
  if (config.model.vision_dp_over_cp) {
    // Megatron Bridge's rule (prior-art.md section 3): split by count with
    // the remainder on the last rank, whatever the batch size (no
    // thresholds), placeholder frames for empty ranks (our dummy frames),
    // no kernel-shape floor, and `flag and cp > 1`: off at cp_size 1.
    o.partitioner = Partitioner::kCount;
    o.policy.enabled = config.parallel.cp_size > 1;
    o.policy.min_tokens = 0;
    o.policy.min_frames = 0;
    o.min_local_patch_rows = 0;
  }
  return o;
}

}  // namespace

PlanOptions arm_plan_options(const TrainConfig& config, bool sharded) {
  return arm_options(
      config, sharded, frameshard::plan_options(config.parallel));
}

PlanOptions arm_plan_options(
    const TrainConfig& config, bool sharded, const TowerDims& running) {
  return arm_options(
      config, sharded, frameshard::plan_options(config.parallel, running));
}

}  // namespace train
}  // namespace frameshard
