// The configuration's rule table (config_rules.h): one rule per leaf key,
// grouped by what the keys configure. The generic builders take the field
// as a generic lambda returning the member, so one accessor serves both the
// reader (Config&) and the check (const Config&).
#include "io/config_rules.h"

#include <frameshard/cost.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>

#include <utility>

namespace frameshard {
namespace config_detail {
namespace {

using Read = decltype(Rule::read);
using Check = decltype(Rule::check);

std::string fs_key(const char* leaf) {
  return std::string(kFrameShardingPath) + "." + leaf;
}

void no_check(const Config&, const std::string&) {}

// An integer in [min_value, max_value].
template <class Field>
Rule int_rule(
    std::string path,
    int64_t min_value,
    Field field,
    int64_t max_value = kNoMax) {
  Read read = [min_value, max_value, field](
                  const YAML::Node& n,
                  const std::string& p,
                  Config& c,
                  const Source& s) {
    field(c) = read_int(n, min_value, p, s, max_value);
  };
  Check check = [min_value, max_value, field](
                    const Config& c, const std::string& p) {
    check_int(field(c), min_value, p, "", max_value);
  };
  return Rule{std::move(path), std::move(read), std::move(check)};
}

// A string that is one of two words ("all or owner").
template <class Field>
Rule choice_rule(
    std::string path, const char* first, const char* second, Field field) {
  const std::string expected = std::string(first) + " or " + second;
  auto ok = [first, second](const std::string& v) {
    return v == first || v == second;
  };
  Read read = [expected, ok, field](
                  const YAML::Node& n,
                  const std::string& p,
                  Config& c,
                  const Source& s) {
    const std::string v = read_string(n, expected, p, s);
    if (!ok(v)) {
      config_error(p, expected, render(n), s.at(n));
    }
    field(c) = v;
  };
  Check check = [expected, ok, field](const Config& c, const std::string& p) {
    if (!ok(field(c))) {
      config_error(p, expected, quote(field(c)));
    }
  };
  return Rule{std::move(path), std::move(read), std::move(check)};
}

// A plain number in `range` (config_values.h).
template <class Field>
Rule number_rule(std::string path, NumberRange range, Field field) {
  Read read = [range, field](
                  const YAML::Node& n,
                  const std::string& p,
                  Config& c,
                  const Source& s) { field(c) = read_number(n, range, p, s); };
  Check check = [range, field](const Config& c, const std::string& p) {
    check_number(field(c), range, p);
  };
  return Rule{std::move(path), std::move(read), std::move(check)};
}

// true or false; `check` re-checks it against the rest of the config.
template <class Field>
Rule bool_rule(std::string path, Field field, Check check = no_check) {
  Read read = [field](
                  const YAML::Node& n,
                  const std::string& p,
                  Config& c,
                  const Source& s) { field(c) = read_bool(n, p, s); };
  return Rule{std::move(path), std::move(read), std::move(check)};
}

// distributed.{cp,dp,tp}_size.
void add_mesh_sizes(std::vector<Rule>& rules) {
  rules.push_back(int_rule(
      "distributed.cp_size",
      1,
      [](auto& c) -> auto& { return c.cp_size; },
      kMaxWorld));
  rules.push_back(int_rule(
      "distributed.dp_size", 1, [](auto& c) -> auto& { return c.dp_size; }));
  rules.push_back(int_rule(
      "distributed.tp_size", 1, [](auto& c) -> auto& { return c.tp_size; }));
}

// Whether to shard, over which mesh dimensions, and the thresholds below
// which the policy replicates.
void add_sharding_switches(std::vector<Rule>& rules) {
  rules.push_back(bool_rule(
      fs_key("enabled"),
      [](auto& c) -> auto& { return c.frame_sharding.enabled; }));
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
  rules.push_back(int_rule(
      fs_key("min_tokens"), 0, [](auto& c) -> auto& {
        return c.frame_sharding.min_tokens;
      }));
  rules.push_back(int_rule(
      fs_key("min_frames"), 0, [](auto& c) -> auto& {
        return c.frame_sharding.min_frames;
      }));
  rules.push_back(int_rule(
      fs_key("min_local_patch_rows"),
      0,
      [](auto& c) -> auto& { return c.frame_sharding.min_local_patch_rows; },
      kMaxMinLocalPatchRows));
}

// Whether the partitioner spelled `name` may split frames (an unknown name,
// refused by its own rule, may not).
bool splits_frames(const std::string& name) {
  for (Partitioner p : all_partitioners()) {
    if (to_string(p) == name) {
      return traits(p).supports_split;
    }
  }
  return false;
}

// The cost model, the partitioner, the gather and frame splitting.
void add_partitioning(std::vector<Rule>& rules) {
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
  rules.push_back(choice_rule(
      fs_key("gather"), "all", "owner", [](auto& c) -> auto& {
        return c.frame_sharding.gather;
      }));
  rules.push_back(bool_rule(
      fs_key("split_frames"),
      [](auto& c) -> auto& { return c.frame_sharding.split_frames; },
      // Checked after the whole file: the partitioner may come later in it.
      [](const Config& c, const std::string& p) {
        const auto& fs = c.frame_sharding;
        if (fs.split_frames && !splits_frames(fs.partitioner)) {
          config_error(
              p,
              "false with partitioner " + quote(fs.partitioner) +
                  " (frames are split by the optimal partitioner only)",
              "true");
        }
      }));
  rules.push_back(int_rule(
      fs_key("split_exchange_cost"),
      0,
      [](auto& c) -> auto& { return c.frame_sharding.split_exchange_cost; },
      kMaxSplitExchangeCost));
  rules.push_back(number_rule(
      fs_key("split_min_gain"), NumberRange::kFraction, [](auto& c) -> auto& {
        return c.frame_sharding.split_min_gain;
      }));
  rules.push_back(number_rule(
      fs_key("split_exchange_latency_us"), NumberRange::kNonNegative, [
      ](auto& c) -> auto& {
        return c.frame_sharding.split_exchange_latency_us;
      }));
}

// The tower preset (the cost model's shape) and the auto policy's inputs.
void add_tower_and_policy(std::vector<Rule>& rules) {
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
  rules.push_back(choice_rule(
      fs_key("policy"), "threshold", "auto", [](auto& c) -> auto& {
        return c.frame_sharding.policy;
      }));
  rules.push_back(number_rule(
      fs_key("gather_bandwidth_gbps"), NumberRange::kPositive, [
      ](auto& c) -> auto& { return c.frame_sharding.gather_bandwidth_gbps; }));
  rules.push_back(bool_rule(
      fs_key("dedup"),
      [](auto& c) -> auto& { return c.frame_sharding.dedup; }));
  rules.push_back(number_rule(
      fs_key("mesh_min_gain"), NumberRange::kFraction, [](auto& c) -> auto& {
        return c.frame_sharding.mesh_min_gain;
      }));
}

}  // namespace

std::vector<Rule> config_rules() {
  std::vector<Rule> rules;
  add_mesh_sizes(rules);
  add_sharding_switches(rules);
  add_partitioning(rules);
  add_tower_and_policy(rules);
  return rules;
}

}  // namespace config_detail
}  // namespace frameshard
