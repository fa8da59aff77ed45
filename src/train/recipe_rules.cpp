// The rule table of a recipe's model, data and train sections (see
// recipe_rules.h): typed readers from io/config_values.h, one value check
// per field, and the writer to_yaml() uses.
#include "train/recipe_rules.h"

#include <frameshard/workload.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

namespace frameshard {
namespace train {
namespace recipe_detail {
namespace {

using namespace config_detail;  // NOLINT: the rule table reads through them

const std::vector<std::string>& model_towers() {
  // The families frameshard::models builds (the cost presets of the same
  // names describe their FLOPs).
  static const std::vector<std::string> kTowers{
      "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "radio"};
  return kTowers;
}

// How the grpo preset deals a step's samples to the DP replicas
// (data_batch.h).
const std::vector<std::string>& group_orders() {
  static const std::vector<std::string> kOrders{"spread", "contiguous"};
  return kOrders;
}

const std::vector<std::string>& dtypes() {
  static const std::vector<std::string> kDtypes{
      "float32", "float64", "bfloat16"};
  return kDtypes;
}

std::string one_of(const std::vector<std::string>& names) {
  return "one of " + join(names);
}

void check_choice(
    const std::string& v,
    const std::vector<std::string>& choices,
    const std::string& got,
    const std::string& path,
    const std::string& where = "") {
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
    config_error(path, one_of(choices), got, where);
  }
}

// Shortest decimal that reads back as exactly `v`, so to_yaml round-trips
// without printing 0.10000000000000001.
std::string format_double(double v) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) {
      break;
    }
  }
  return buf;
}

std::string double_expectation(double min_value, bool exclusive) {
  return std::string("a number ") + (exclusive ? "> " : ">= ") +
         format_double(min_value);
}

bool double_ok(double v, double min_value, bool exclusive) {
  return std::isfinite(v) && (exclusive ? v > min_value : v >= min_value);
}

// A plain decimal or scientific number (an integer is a number too);
// booleans, quoted text, .inf and .nan are not.
double read_double(
    const YAML::Node& n,
    double min_value,
    bool exclusive,
    const std::string& path,
    const Source& src) {
  const std::string expected = double_expectation(min_value, exclusive);
  if (!is_plain_scalar(n) || n.Scalar().empty()) {
    config_error(path, expected, render(n), src.at(n));
  }
  const std::string& text = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  const bool numeric =
      text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (!numeric || end != text.c_str() + text.size() || errno == ERANGE ||
      !double_ok(v, min_value, exclusive)) {
    config_error(path, expected, render(n), src.at(n));
  }
  return v;
}

// A path: any scalar; null (an empty `model_dir:`) means none.
std::string read_path(
    const YAML::Node& n, const std::string& path, const Source& src) {
  if (n.IsNull()) {
    return "";
  }
  return read_string(n, "a path (a string)", path, src);
}

// Builds the rules from typed pieces: read(node, path, source) -> value,
// check(value, path) and emit(emitter, value). `field` is a generic lambda
// returning the member, so one accessor serves the reader (TrainConfig&),
// the check and the writer (const TrainConfig&).
class RuleBuilder {
 public:
  template <typename Field>
  void add_int(std::string path, Field field, int64_t min_value) {
    add(
        std::move(path),
        field,
        [=](const YAML::Node& n, const std::string& p, const Source& s) {
          return read_int(n, min_value, p, s);
        },
        [=](int64_t v, const std::string& p) { check_int(v, min_value, p); });
  }

  template <typename Field>
  void add_bool(std::string path, Field field) {
    add(
        std::move(path),
        field,
        read_bool,
        [](bool, const std::string&) {},
        [](YAML::Emitter& out, bool v) { out << YAML::TrueFalseBool << v; });
  }

  template <typename Field>
  void add_double(
      std::string path, Field field, double min_value, bool exclusive) {
    add(
        std::move(path),
        field,
        [=](const YAML::Node& n, const std::string& p, const Source& s) {
          return read_double(n, min_value, exclusive, p, s);
        },
        [=](double v, const std::string& p) {
          if (!double_ok(v, min_value, exclusive)) {
            config_error(
                p, double_expectation(min_value, exclusive), format_double(v));
          }
        },
        [](YAML::Emitter& out, double v) { out << format_double(v); });
  }

  template <typename Field>
  void add_choice(
      std::string path, Field field, std::vector<std::string> choices) {
    add(
        std::move(path),
        field,
        [=](const YAML::Node& n, const std::string& p, const Source& s) {
          const std::string v = read_string(n, one_of(choices), p, s);
          check_choice(v, choices, render(n), p, s.at(n));
          return v;
        },
        [=](const std::string& v, const std::string& p) {
          check_choice(v, choices, quote(v), p);
        });
  }

  template <typename Field>
  void add_path(std::string path, Field field) {
    add(std::move(path),
        field,
        read_path,
        [](const std::string&, const std::string&) {});
  }

  std::vector<RecipeRule> take() {
    return std::move(rules_);
  }

 private:
  template <typename Field, typename Read, typename Check>
  void add(std::string path, Field field, Read read, Check check) {
    add(std::move(path),
        field,
        read,
        check,
        [](YAML::Emitter& out, const auto& v) { out << v; });
  }

  template <typename Field, typename Read, typename Check, typename Emit>
  void add(std::string path, Field field, Read read, Check check, Emit emit) {
    rules_.push_back(RecipeRule{
        std::move(path),
        [=](const YAML::Node& n,
            const std::string& p,
            TrainConfig& c,
            const Source& s) { field(c) = read(n, p, s); },
        [=](const TrainConfig& c, const std::string& p) { check(field(c), p); },
        [=](YAML::Emitter& out, const TrainConfig& c) {
          emit(out, field(c));
        }});
  }

  std::vector<RecipeRule> rules_;
};

// clang-format off
#define FRAMESHARD_RECIPE_FIELD(section, name) \
  #section "." #name, [](auto& c) -> auto& { return c.section.name; }
// clang-format on

void add_model_rules(RuleBuilder& b) {
  b.add_choice(FRAMESHARD_RECIPE_FIELD(model, tower), model_towers());
  b.add_path(FRAMESHARD_RECIPE_FIELD(model, model_dir));
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, vision_depth), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, vision_hidden), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, vision_heads), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, deepstack_layers), 0);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, text_hidden), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, text_layers), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, text_heads), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, text_ffn), 1);
  // Token ids 0 and 1 are padding and media: at least one text id remains.
  b.add_int(FRAMESHARD_RECIPE_FIELD(model, vocab_size), 3);
  b.add_bool(FRAMESHARD_RECIPE_FIELD(model, vision_dp_over_cp));
  b.add_bool(FRAMESHARD_RECIPE_FIELD(model, vision_checkpointing));
}

void add_data_rules(RuleBuilder& b) {
  b.add_choice(FRAMESHARD_RECIPE_FIELD(data, preset), workload_preset_names());
  b.add_path(FRAMESHARD_RECIPE_FIELD(data, manifest));
  b.add_int(FRAMESHARD_RECIPE_FIELD(data, scale), 1);
  // At least one text token per run, so every synthetic batch has a label.
  b.add_int(FRAMESHARD_RECIPE_FIELD(data, text_tokens), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(data, samples_per_step), 1);
  b.add_int(FRAMESHARD_RECIPE_FIELD(data, group_size), 1);
  b.add_choice(FRAMESHARD_RECIPE_FIELD(data, group_order), group_orders());
  b.add_int(FRAMESHARD_RECIPE_FIELD(data, seed), 0);
}

void add_train_rules(RuleBuilder& b) {
  b.add_int(FRAMESHARD_RECIPE_FIELD(train, steps), 1);
  b.add_double(FRAMESHARD_RECIPE_FIELD(train, lr), 0.0, true);
  b.add_double(FRAMESHARD_RECIPE_FIELD(train, weight_decay), 0.0, false);
  b.add_choice(FRAMESHARD_RECIPE_FIELD(train, dtype), dtypes());
  b.add_int(FRAMESHARD_RECIPE_FIELD(train, seed), 0);
  b.add_int(FRAMESHARD_RECIPE_FIELD(train, timeout_ms), 1);
}

#undef FRAMESHARD_RECIPE_FIELD

std::vector<RecipeRule> build_rules() {
  RuleBuilder b;
  add_model_rules(b);
  add_data_rules(b);
  add_train_rules(b);
  return b.take();
}

}  // namespace

const std::vector<std::string>& recipe_sections() {
  static const std::vector<std::string> kSections{"model", "data", "train"};
  return kSections;
}

const std::vector<RecipeRule>& recipe_rules() {
  static const std::vector<RecipeRule> kRules = build_rules();
  return kRules;
}

const RecipeRule* find_rule(const std::string& path) {
  for (const RecipeRule& r : recipe_rules()) {
    if (r.path == path) {
      return &r;
    }
  }
  return nullptr;
}

std::vector<std::string> section_keys(const std::string& section) {
  std::vector<std::string> keys;
  const std::string prefix = section + ".";
  for (const RecipeRule& r : recipe_rules()) {
    if (r.path.compare(0, prefix.size(), prefix) == 0) {
      keys.push_back(r.path.substr(prefix.size()));
    }
  }
  return keys;
}

void apply_section(
    const YAML::Node& node,
    const std::string& section,
    TrainConfig& config,
    const Source& src) {
  if (node.IsNull()) {
    return;  // an empty section keeps its defaults
  }
  if (!node.IsMap()) {
    config_error(section, "a mapping", render(node), src.at(node));
  }
  // The same document rules as frameshard/config.h's sections.
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string where = src.at(it->first);
    if (!it->first.IsScalar()) {
      config_error(section, "scalar keys", "key " + render(it->first), where);
    }
    const std::string key = it->first.Scalar();
    const std::string child = section + "." + key;
    if (key.find('.') != std::string::npos) {
      config_error(
          child,
          "a plain key (nest the sections instead of dotting them)",
          "key " + key,
          where);
    }
    if (!seen.insert(key).second) {
      config_error(child, "each key once", "a duplicate key", where);
    }
    const RecipeRule* rule = find_rule(child);
    if (rule == nullptr) {
      config_error(
          child,
          "a known key under " + section + " (" + join(section_keys(section)) +
              ")",
          "unknown key " + key,
          where);
    }
    rule->read(it->second, child, config, src);
  }
}

void check_cross_fields(const TrainConfig& config) {
  const ModelConfig& m = config.model;
  // Qwen vision blocks rotate each head in 2-D (h and w halves), so a head
  // size must split in four (frameshard::models checks it again); RADIO
  // has absolute positions only.
  const bool rotary = m.tower != "radio";
  if (m.vision_hidden % m.vision_heads != 0 ||
      (rotary && (m.vision_hidden / m.vision_heads) % 4 != 0)) {
    config_error(
        "model.vision_heads",
        "a divisor of model.vision_hidden (" + std::to_string(m.vision_hidden) +
            (rotary ? ") leaving a head size divisible by 4 (2-D rotary)"
                    : ")"),
        std::to_string(m.vision_heads));
  }
  // The decoder's rotary embedding pairs channels: an even head size.
  if (m.text_hidden % m.text_heads != 0 ||
      (m.text_hidden / m.text_heads) % 2 != 0) {
    config_error(
        "model.text_heads",
        "a divisor of model.text_hidden (" + std::to_string(m.text_hidden) +
            ") leaving an even head size (rotary)",
        std::to_string(m.text_heads));
  }
  // DeepStack mergers tap distinct tower layers (qwen3-vl; the other
  // families have none and ignore the field).
  if (m.tower == "qwen3-vl" && m.deepstack_layers > m.vision_depth) {
    config_error(
        "model.deepstack_layers",
        "at most model.vision_depth (" + std::to_string(m.vision_depth) +
            ") for qwen3-vl",
        std::to_string(m.deepstack_layers));
  }
}

}  // namespace recipe_detail
}  // namespace train
}  // namespace frameshard
