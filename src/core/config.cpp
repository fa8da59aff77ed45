// The YAML configuration: one rule table drives parsing of files, dotted
// overrides and validate(), so each field is checked in exactly one place.
#include <frameshard/config.h>

#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/partition.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <utility>

namespace frameshard {
namespace {

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

[[noreturn]] void config_error(
    const std::string& path,
    const std::string& expected,
    const std::string& got,
    const std::string& where = "") {
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
    const std::string& where = "") {
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
    const std::string& where = "") {
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
    const std::string& where = "") {
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
    const std::string& where = "") {
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
    const std::string& where = "") {
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

// ---------------------------------------------------------- rule table

// One leaf of the schema: how to read it from YAML (type checks, then the
// value check) and how to re-check a value set from code (validate()).
struct Rule {
  std::string path;
  std::function<void(
      const YAML::Node&, const std::string&, Config&, const Source&)>
      read;
  std::function<void(const Config&, const std::string&)> check;
};

std::string fs_key(const char* leaf) {
  return std::string(kFrameShardingPath) + "." + leaf;
}

std::vector<Rule> build_rules() {
  std::vector<Rule> rules;
  // `field` is a generic lambda returning the member, so one accessor
  // serves both the reader (Config&) and the check (const Config&).
  auto add_int = [&rules](std::string path, int64_t min_value, auto field) {
    Rule r;
    r.path = std::move(path);
    r.read = [min_value, field](
                 const YAML::Node& n,
                 const std::string& p,
                 Config& c,
                 const Source& s) { field(c) = read_int(n, min_value, p, s); };
    r.check = [min_value, field](const Config& c, const std::string& p) {
      check_int(field(c), min_value, p);
    };
    rules.push_back(std::move(r));
  };
  add_int(
      "distributed.cp_size", 1, [](auto& c) -> auto& { return c.cp_size; });
  add_int(
      "distributed.dp_size", 1, [](auto& c) -> auto& { return c.dp_size; });
  add_int(
      "distributed.tp_size", 1, [](auto& c) -> auto& { return c.tp_size; });

  rules.push_back(Rule{
      fs_key("enabled"),
      [](const YAML::Node& n,
         const std::string& p,
         Config& c,
         const Source& s) { c.frame_sharding.enabled = read_bool(n, p, s); },
      [](const Config&, const std::string&) {}});
  rules.push_back(Rule{
      fs_key("mesh_dims"),
      [](const YAML::Node& n,
         const std::string& p,
         Config& c,
         const Source& s) {
        c.frame_sharding.mesh_dims = read_mesh_dims(n, p, s);
      },
      [](const Config& c, const std::string& p) {
        const auto& d = c.frame_sharding.mesh_dims;
        check_mesh_dims(d, "[" + join(d) + "]", p);
      }});
  add_int(
      fs_key("min_tokens"), 0, [](auto& c) -> auto& {
        return c.frame_sharding.min_tokens;
      });
  add_int(
      fs_key("min_frames"), 0, [](auto& c) -> auto& {
        return c.frame_sharding.min_frames;
      });
  add_int(
      fs_key("min_local_patch_rows"), 0, [](auto& c) -> auto& {
        return c.frame_sharding.min_local_patch_rows;
      });
  rules.push_back(Rule{
      fs_key("cost_alpha"),
      [](const YAML::Node& n,
         const std::string& p,
         Config& c,
         const Source& s) {
        c.frame_sharding.cost_alpha =
            read_cost_alpha(n, c.frame_sharding.tower, p, s);
      },
      [](const Config& c, const std::string& p) {
        const auto& fs = c.frame_sharding;
        check_cost_alpha(fs.cost_alpha, fs.tower, fs.cost_alpha, p);
      }});
  rules.push_back(Rule{
      fs_key("partitioner"),
      [](const YAML::Node& n,
         const std::string& p,
         Config& c,
         const Source& s) {
        const std::string v = read_string(n, partitioner_expectation(), p, s);
        check_partitioner(v, render(n), p, s.at(n));
        c.frame_sharding.partitioner = v;
      },
      [](const Config& c, const std::string& p) {
        const auto& v = c.frame_sharding.partitioner;
        check_partitioner(v, v, p);
      }});
  rules.push_back(Rule{
      fs_key("tower"),
      [](const YAML::Node& n,
         const std::string& p,
         Config& c,
         const Source& s) {
        const std::string expected =
            "a tower preset (" + join(tower_preset_names()) + ")";
        const std::string v = read_string(n, expected, p, s);
        check_tower(v, render(n), p, s.at(n));
        c.frame_sharding.tower = v;
      },
      [](const Config& c, const std::string& p) {
        const auto& v = c.frame_sharding.tower;
        check_tower(v, v, p);
      }});
  return rules;
}

class Schema {
 public:
  Schema() : rules_(build_rules()) {
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

  // Throws for a key that is not in the schema under mapping `parent`.
  [[noreturn]] void unknown_key(
      const std::string& parent,
      const std::string& key,
      const std::string& where) const {
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
    config_error(
        path,
        "a known key under " + (parent.empty() ? "the top level" : parent) +
            " (" + join(children(parent)) + ")",
        "unknown key " + key,
        where);
  }

  // Applies `node` at `path` (a leaf or a mapping) to `config`.
  void apply(
      const YAML::Node& node,
      const std::string& path,
      Config& config,
      const Source& src) const {
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
            "key " + key,
            src.at(it->first));
      }
      if (!seen.insert(key).second) {
        config_error(
            child, "each key once", "a duplicate key", src.at(it->first));
      }
      if (!rule(child) && !is_map(child)) {
        unknown_key(path, key, src.at(it->first));
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
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
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
  schema().apply(root, "", config, Source{source});
  validate(config);
  return config;
}

Config load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FRAMESHARD_CHECK(
      in.good(),
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
          quote(dotted_key));
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
          "unknown key " + dotted_key.substr(dot + 1));
    }
    parent = path;
    begin = dot + 1;
  }
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::ParserException& e) {
    config_error(dotted_key, "a YAML value", quote(value) + " (" + e.msg + ")");
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
  out << YAML::Key << "tower" << YAML::Value << fs.tower;
  out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

PlanOptions plan_options(const Config& config) {
  validate(config);
  const FrameShardingConfig& fs = config.frame_sharding;
  PlanOptions o;
  o.world = config.cp_size;
  o.partitioner = parse_partitioner(fs.partitioner, "partitioner");
  o.cost = parse_cost_alpha(fs.cost_alpha, fs.tower, "cost_alpha");
  o.min_local_patch_rows = fs.min_local_patch_rows;
  o.policy.enabled = fs.enabled;
  o.policy.min_tokens = fs.min_tokens;
  o.policy.min_frames = fs.min_frames;
  return o;
}

}  // namespace frameshard
