// The YAML configuration: one rule table (config_rules.cpp) drives parsing
// of files, dotted overrides and validate(), so each field is checked in
// exactly one place; this file walks documents and paths through it.
#include <frameshard/config.h>

#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>

#include "io/config_rules.h"
#include "io/config_values.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <utility>

namespace frameshard {
namespace {

using namespace config_detail;  // NOLINT: the rule table reads through them

// The shortest decimal text that reads back as `v` (0.05, not
// 0.050000000000000003): YAML the user can read, exact on a round trip.
std::string shortest_decimal(double v) {
  char buf[32];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // 50, not 5e+01
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) {
      break;
    }
  }
  return buf;
}

class Schema {
 public:
  Schema() : rules_(config_rules()) {
    for (const Rule& r : rules_) {
      // Every proper prefix of a leaf path is a mapping ("" is the root).
      std::size_t pos = 0;
      maps_.insert("");
      while ((pos = r.path.find('.', pos)) != std::string::npos) {
        maps_.insert(r.path.substr(0, pos));
        ++pos;
      }
    }
  }

  const std::vector<Rule>& rules() const {
    return rules_;
  }

  const Rule* rule(const std::string& path) const {
    for (const Rule& r : rules_) {
      if (r.path == path) {
        return &r;
      }
    }
    return nullptr;
  }

  bool is_map(const std::string& path) const {
    return maps_.count(path) > 0;
  }

  // Keys allowed directly under mapping `path`, in declaration order.
  std::vector<std::string> children(const std::string& path) const {
    const std::string prefix = path.empty() ? "" : path + ".";
    std::vector<std::string> out;
    for (const Rule& r : rules_) {
      if (r.path.compare(0, prefix.size(), prefix) != 0) {
        continue;
      }
      const std::string rest = r.path.substr(prefix.size());
      const std::string key = rest.substr(0, rest.find('.'));
      if (std::find(out.begin(), out.end(), key) == out.end()) {
        out.push_back(key);
      }
    }
    return out;
  }

  // Throws for a key that is not in the schema under mapping `parent`;
  // `other_sections` are the top-level keys another parser owns.
  [[noreturn]] void unknown_key(
      const std::string& parent,
      const std::string& key,
      const std::string& where,
      const std::vector<std::string>& other_sections = {}) const {
    const std::string path = parent.empty() ? key : parent + "." + key;
    if (path == "distributed.cp_vision_frame_sharding") {
      config_error(
          path,
          "the nested section " + std::string(kFrameShardingPath) +
              " (the flat legacy key is no longer read; move its fields "
              "there)",
          "the flat legacy key cp_vision_frame_sharding",
          where);
    }
    std::vector<std::string> known = children(parent);
    if (parent.empty()) {
      known.insert(known.end(), other_sections.begin(), other_sections.end());
    }
    config_error(
        path,
        "a known key under " + (parent.empty() ? "the top level" : parent) +
            " (" + join(known) + ")",
        "unknown key " + detail::excerpt(key),
        where);
  }

  // Applies `node` at `path` (a leaf or a mapping) to `config`. At the top
  // level, the keys in `other_sections` are checked like ours (scalar, plain,
  // once) and then skipped.
  void apply(
      const YAML::Node& node,
      const std::string& path,
      Config& config,
      const Source& src,
      const std::vector<std::string>& other_sections = {}) const {
    if (const Rule* r = rule(path)) {
      r->read(node, path, config, src);
      return;
    }
    if (node.IsNull()) {
      return;  // an empty section keeps its defaults
    }
    if (!node.IsMap()) {
      config_error(path, "a mapping", render(node), src.at(node));
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) {
        config_error(
            path, "scalar keys", "key " + render(it->first), src.at(it->first));
      }
      const std::string key = it->first.Scalar();
      const std::string child = path.empty() ? key : path + "." + key;
      if (key.find('.') != std::string::npos &&
          child != "distributed.cp_vision_frame_sharding") {
        // Dotted keys belong on the command line; in a file they would
        // silently alias nested ones.
        config_error(
            child,
            "a plain key (nest the sections instead of dotting them)",
            "key " + detail::excerpt(key),
            src.at(it->first));
      }
      if (!seen.insert(key).second) {
        config_error(
            child, "each key once", "a duplicate key", src.at(it->first));
      }
      if (path.empty() &&
          std::find(other_sections.begin(), other_sections.end(), key) !=
              other_sections.end()) {
        continue;
      }
      if (!rule(child) && !is_map(child)) {
        unknown_key(path, key, src.at(it->first), other_sections);
      }
      apply(it->second, child, config, src);
    }
  }

 private:
  std::vector<Rule> rules_;
  std::set<std::string> maps_;
};

const Schema& schema() {
  static const Schema kSchema;
  return kSchema;
}

}  // namespace

Config parse_config(const std::string& yaml, const std::string& source) {
  return parse_config(yaml, source, {});
}

Config parse_config(
    const std::string& yaml,
    const std::string& source,
    const std::vector<std::string>& other_sections) {
  YAML::Node root;
  try {
    root = load_yaml(yaml, "", Source{source});
  } catch (const YAML::ParserException& e) {
    detail::fail(
        "config",
        source.empty() ? "<string>" : source,
        ":",
        e.mark.line + 1,
        ":",
        e.mark.column + 1,
        ": expected valid YAML, got a syntax error: ",
        e.msg);
  }
  Config config;
  schema().apply(root, "", config, Source{source}, other_sections);
  validate(config);
  return config;
}

Config load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  // A directory opens and reads as empty: it would pass as an empty config.
  FRAMESHARD_CHECK(
      in.good() && std::filesystem::is_regular_file(path, ec),
      "config",
      "expected a readable YAML file, got ",
      path,
      " (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

void apply_override(
    Config& config, const std::string& dotted_key, const std::string& value) {
  const Schema& s = schema();
  // Walk the dotted key through the schema so an unknown component is
  // reported at the level where it goes wrong, listing the allowed keys.
  std::string parent;
  std::size_t begin = 0;
  while (true) {
    const std::size_t dot = dotted_key.find('.', begin);
    const std::string key = dotted_key.substr(
        begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (key.empty()) {
      config_error(
          dotted_key.empty() ? "(override)" : dotted_key,
          "a dotted key such as " + std::string(kFrameShardingPath) +
              ".enabled",
          quote(detail::excerpt(dotted_key)));
    }
    const std::string path = parent.empty() ? key : parent + "." + key;
    if (!s.rule(path) && !s.is_map(path)) {
      s.unknown_key(parent, key, "");
    }
    if (dot == std::string::npos) {
      break;
    }
    if (s.rule(path)) {
      config_error(
          dotted_key,
          "a key that ends at a value (" + path + " has no sub-keys)",
          "unknown key " + detail::excerpt(dotted_key.substr(dot + 1)));
    }
    parent = path;
    begin = dot + 1;
  }
  YAML::Node node;
  try {
    node = load_yaml(value, dotted_key, Source{});
  } catch (const YAML::ParserException& e) {
    config_error(
        dotted_key,
        "a YAML value",
        quote(detail::excerpt(value)) + " (" + e.msg + ")");
  }
  Config updated = config;
  s.apply(node, dotted_key, updated, Source{});
  validate(updated);
  config = std::move(updated);
}

void validate(const Config& config) {
  for (const Rule& r : schema().rules()) {
    r.check(config, r.path);
  }
}

std::vector<std::string> frame_sharding_keys() {
  return schema().children(kFrameShardingPath);
}

std::string to_yaml(const Config& config) {
  const FrameShardingConfig& fs = config.frame_sharding;
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "distributed" << YAML::Value
      << YAML::BeginMap;
  out << YAML::Key << "cp_size" << YAML::Value << config.cp_size;
  out << YAML::Key << "dp_size" << YAML::Value << config.dp_size;
  out << YAML::Key << "tp_size" << YAML::Value << config.tp_size;
  out << YAML::Key << "multimodal" << YAML::Value << YAML::BeginMap << YAML::Key
      << "vision" << YAML::Value << YAML::BeginMap << YAML::Key
      << "frame_sharding" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << YAML::TrueFalseBool
      << fs.enabled;
  out << YAML::Key << "mesh_dims" << YAML::Value << YAML::Flow << fs.mesh_dims;
  out << YAML::Key << "min_tokens" << YAML::Value << fs.min_tokens;
  out << YAML::Key << "min_frames" << YAML::Value << fs.min_frames;
  out << YAML::Key << "min_local_patch_rows" << YAML::Value
      << fs.min_local_patch_rows;
  // An integer alpha is written as an integer, every spec as a string (the
  // emitter quotes only what would otherwise read as another type).
  int64_t alpha = 0;
  out << YAML::Key << "cost_alpha" << YAML::Value;
  if (parse_int_literal(fs.cost_alpha, &alpha)) {
    out << alpha;
  } else {
    out << fs.cost_alpha;
  }
  out << YAML::Key << "partitioner" << YAML::Value << fs.partitioner;
  out << YAML::Key << "gather" << YAML::Value << fs.gather;
  out << YAML::Key << "split_frames" << YAML::Value << YAML::TrueFalseBool
      << fs.split_frames;
  out << YAML::Key << "split_exchange_cost" << YAML::Value
      << fs.split_exchange_cost;
  out << YAML::Key << "split_min_gain" << YAML::Value
      << shortest_decimal(fs.split_min_gain);
  out << YAML::Key << "split_exchange_latency_us" << YAML::Value
      << shortest_decimal(fs.split_exchange_latency_us);
  out << YAML::Key << "tower" << YAML::Value << fs.tower;
  out << YAML::Key << "policy" << YAML::Value << fs.policy;
  out << YAML::Key << "gather_bandwidth_gbps" << YAML::Value
      << YAML::Precision(17) << fs.gather_bandwidth_gbps;
  out << YAML::Key << "dedup" << YAML::Value << YAML::TrueFalseBool << fs.dedup;
  out << YAML::Key << "mesh_min_gain" << YAML::Value
      << shortest_decimal(fs.mesh_min_gain);
  out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

namespace {

// Pieces of a window-attention tower end on window rows (8 patch rows for
// Qwen2.5-VL's 8 x 8 patch windows); 0 for a full-attention tower.
int64_t window_side_of(const TowerDims& tower) {
  int64_t side = 0;
  while ((side + 1) * (side + 1) <= tower.window_patches) {
    ++side;
  }
  return side;
}

// `tower`: the preset frame_sharding.tower names, or the running tower.
PlanOptions options_for(
    const Config& config, const TowerDims& tower, bool running) {
  const FrameShardingConfig& fs = config.frame_sharding;
  PlanOptions o;
  o.world = config.cp_size;
  o.partitioner = parse_partitioner(fs.partitioner, "partitioner");
  o.cost = running ? parse_cost_alpha(fs.cost_alpha, tower, "cost_alpha")
                   : parse_cost_alpha(fs.cost_alpha, fs.tower, "cost_alpha");
  o.min_local_patch_rows = fs.min_local_patch_rows;
  o.policy.enabled = fs.enabled;
  o.policy.min_tokens = fs.min_tokens;
  o.policy.min_frames = fs.min_frames;
  o.split.enabled = fs.split_frames;
  o.split.exchange_row_cost = static_cast<double>(fs.split_exchange_cost);
  o.split.min_gain = fs.split_min_gain;
  o.split.window_side = window_side_of(tower);
  o.policy.kind = parse_policy_kind(fs.policy, "policy");
  o.policy.gather_bandwidth_gbps = fs.gather_bandwidth_gbps;
  const double flop_seconds = flop_cost_model(tower).seconds_per_unit;
  if (o.cost.seconds_per_unit <= 0.0) {
    // A bare alpha or automodel: the units of the tower's FLOP model.
    o.cost.seconds_per_unit = flop_seconds;
  }
  // split_exchange_cost is in the units of the tower's FLOP model; a
  // calibrated cost counts seconds, where 1000 units a row would make every
  // frame too expensive to cut, so it moves into the cost model's units.
  o.split.exchange_row_cost *= flop_seconds / o.cost.seconds_per_unit;
  // The exchanges' fixed latency: one per full-attention layer, in seconds,
  // into the cost model's units.
  o.split.exchange_fixed_cost = fs.split_exchange_latency_us * 1e-6 *
                                static_cast<double>(tower.full_layers()) /
                                o.cost.seconds_per_unit;
  return o;
}

}  // namespace

PlanOptions plan_options(const Config& config) {
  validate(config);
  return options_for(config, tower_preset(config.frame_sharding.tower), false);
}

PlanOptions plan_options(const Config& config, const TowerDims& running) {
  validate(config);
  return options_for(config, running, true);
}

}  // namespace frameshard
