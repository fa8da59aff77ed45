#include <frameshard/calibrate.h>
#include <frameshard/cost.h>
#include <frameshard/error.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace frameshard {

namespace {

// Hugging Face config values of the vision towers.
const std::vector<TowerDims>& presets() {
  static const std::vector<TowerDims> kPresets = [] {
    std::vector<TowerDims> v;
    {
      TowerDims t;  // Qwen2-VL: plain GELU MLP, mlp_ratio 4
      t.name = "qwen2-vl";
      t.depth = 32;
      t.hidden = 1280;
      t.intermediate = 5120;
      t.mergers = 1;
      t.out_hidden = 3584;  // transformers' default (Qwen2-VL-7B)
      v.push_back(t);
    }
    {
      TowerDims t;  // Qwen2.5-VL: SwiGLU, 112 px windows of 14 px patches
      t.name = "qwen2.5-vl";
      t.depth = 32;
      t.hidden = 1280;
      t.intermediate = 3420;
      t.gated_mlp = true;
      t.window_patches = (112 / 14) * (112 / 14);
      t.full_attention_layers = {7, 15, 23, 31};
      t.mergers = 1;
      t.out_hidden = 3584;  // transformers' default (Qwen2.5-VL-7B)
      v.push_back(t);
    }
    {
      TowerDims t;  // Qwen3-VL 8B/32B/30B-A3B/235B
      t.name = "qwen3-vl";
      t.depth = 27;
      t.hidden = 1152;
      t.intermediate = 4304;
      t.mergers = 4;        // the merger and 3 DeepStack mergers
      t.out_hidden = 3584;  // transformers' default
      v.push_back(t);
    }
    {
      TowerDims t;  // Qwen3-VL 2B/4B
      t.name = "qwen3-vl-small";
      t.depth = 24;
      t.hidden = 1024;
      t.intermediate = 4096;
      t.mergers = 4;
      t.out_hidden = 3584;  // transformers' default
      v.push_back(t);
    }
    {
      TowerDims t;  // Qwen3.5 reuses the Qwen3-VL tower
      t.name = "qwen3.5";
      t.depth = 27;
      t.hidden = 1152;
      t.intermediate = 4304;
      t.mergers = 1;        // no DeepStack
      t.out_hidden = 3584;  // transformers' default
      v.push_back(t);
    }
    {
      TowerDims t;  // Nemotron Omni's RADIO (transformers' RadioConfig)
      t.name = "radio";
      t.depth = 32;
      t.hidden = 1280;
      t.intermediate = 5120;    // mlp_ratio 4
      t.mergers = 1;            // pixel shuffle 2 x 2, then the projector
      t.merger_hidden = 4096;   // projector_hidden_size: transformers' default
      t.out_hidden = 4096;      // NemotronHConfig.hidden_size: its default
      t.prefix_tokens = 3 + 7;  // num_cls_tokens + num_registers
      v.push_back(t);
    }
    return v;
  }();
  return kPresets;
}

const TowerDims* find_preset(const std::string& name) {
  for (const TowerDims& t : presets()) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

std::string preset_list() {
  std::string out;
  for (const TowerDims& t : presets()) {
    if (!out.empty()) {
      out += ", ";
    }
    out += t.name;
  }
  return out;
}

// Integral values print without a fraction ("6608", not "6608.000000").
std::string fmt(double v) {
  std::ostringstream os;
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    os << static_cast<int64_t>(v);
  } else {
    os.precision(10);
    os << v;
  }
  return os.str();
}

bool parse_nonneg_int(const std::string& s, int64_t& out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') {
    return false;
  }
  const char* end = s.data() + s.size();
  auto res = std::from_chars(s.data(), end, out);
  return res.ec == std::errc() && res.ptr == end;
}

bool parse_nonneg_double(const std::string& s, double& out) {
  if (s.empty() || !((s[0] >= '0' && s[0] <= '9') || s[0] == '.')) {
    return false;
  }
  const char* end = s.data() + s.size();
  auto res = std::from_chars(s.data(), end, out);
  return res.ec == std::errc() && res.ptr == end && std::isfinite(out) &&
         out >= 0.0;
}

}  // namespace

bool is_calibration_path(const std::string& spec) {
  if (spec.find('/') != std::string::npos) {
    return true;
  }
  // "cal.txt" is a file; "1.5" is a (rejected) fractional alpha.
  double number = 0.0;
  return spec.find('.') != std::string::npos &&
         spec.find(':') == std::string::npos &&
         !parse_nonneg_double(spec, number) && spec[0] != '-';
}

namespace {

[[noreturn]] void bad_spec(const char* field, const std::string& spec) {
  detail::fail(
      "parse_cost_alpha",
      field,
      ": expected a non-negative integer, \"auto\", a tower preset (",
      preset_list(),
      "), \"automodel\", \"automodel:<preset>\", \"quadratic:a,b,c\" "
      "(a, b, c >= 0) or a calibration file's path, got \"",
      spec,
      "\"");
}

// "alpha=6608", or for a window model "alpha=b+w*min(p,W), effective e".
std::string alpha_text(const CostModel& m) {
  if (m.window_coef == 0.0) {
    return "alpha=" + fmt(m.b);
  }
  return "alpha=" + fmt(m.b) + "+" + fmt(m.window_coef) + "*min(p," +
         std::to_string(m.window) + "), effective " + fmt(m.effective_alpha());
}

}  // namespace

int64_t TowerDims::full_layers() const {
  return window_patches > 0 ? static_cast<int64_t>(full_attention_layers.size())
                            : depth;
}

int64_t TowerDims::window_layers() const {
  return depth - full_layers();
}

std::string TowerDims::describe() const {
  std::ostringstream os;
  os << name << " depth " << depth << ", width " << hidden << ", "
     << (gated_mlp ? "gated " : "") << "mlp " << intermediate;
  if (window_patches > 0) {
    os << ", " << window_patches << "-patch windows, " << full_layers()
       << " full-attention layers";
  }
  if (mergers > 0) {
    os << ", " << mergers << (mergers == 1 ? " merger" : " mergers");
    if (merger_hidden > 0) {
      os << " of width " << merger_hidden;
    }
    os << " to " << out_hidden;
  }
  if (prefix_tokens > 0) {
    os << ", " << prefix_tokens << " prefix tokens per frame";
  }
  return os.str();
}

const TowerDims& tower_preset(const std::string& name) {
  const TowerDims* t = find_preset(name);
  FRAMESHARD_CHECK(
      t != nullptr,
      "tower_preset",
      "expected one of ",
      preset_list(),
      ", got \"",
      name,
      "\"");
  return *t;
}

std::vector<std::string> tower_preset_names() {
  std::vector<std::string> names;
  for (const TowerDims& t : presets()) {
    names.push_back(t.name);
  }
  return names;
}

double CostModel::operator()(int64_t patch_rows) const {
  const double p = static_cast<double>(patch_rows);
  double cost = a * p * p + b * p + c;
  if (window_coef != 0.0 && window > 0) {
    cost += window_coef * p * static_cast<double>(std::min(patch_rows, window));
  }
  return cost;
}

double CostModel::effective_alpha() const {
  return b + window_coef * static_cast<double>(window);
}

CostModel CostModel::from_alpha(double alpha) {
  FRAMESHARD_CHECK(
      std::isfinite(alpha) && alpha >= 0.0,
      "CostModel::from_alpha",
      "expected a finite alpha >= 0, got ",
      alpha);
  CostModel m;
  m.b = alpha;
  m.label = "alpha=" + fmt(alpha);
  return m;
}

CostModel CostModel::quadratic(double a, double b, double c) {
  FRAMESHARD_CHECK(
      std::isfinite(a) && std::isfinite(b) && std::isfinite(c) && a >= 0.0 &&
          b >= 0.0 && c >= 0.0,
      "CostModel::quadratic",
      "expected finite coefficients a, b, c >= 0, got a=",
      a,
      ", b=",
      b,
      ", c=",
      c);
  CostModel m;
  m.a = a;
  m.b = b;
  m.c = c;
  m.label = "quadratic a=" + fmt(a) + ",b=" + fmt(b) + ",c=" + fmt(c);
  m.seconds_per_unit = 1.0;
  return m;
}

CostModel flop_cost_model(const TowerDims& tower) {
  const char* fn = "flop_cost_model";
  FRAMESHARD_CHECK(
      tower.depth > 0,
      fn,
      "expected ",
      tower.name,
      ".depth > 0, got ",
      tower.depth);
  FRAMESHARD_CHECK(
      tower.hidden > 0,
      fn,
      "expected ",
      tower.name,
      ".hidden > 0, got ",
      tower.hidden);
  FRAMESHARD_CHECK(
      tower.intermediate > 0,
      fn,
      "expected ",
      tower.name,
      ".intermediate > 0, got ",
      tower.intermediate);
  FRAMESHARD_CHECK(
      tower.window_patches >= 0,
      fn,
      "expected ",
      tower.name,
      ".window_patches >= 0, got ",
      tower.window_patches);
  if (tower.window_patches > 0) {
    std::vector<int64_t> layers = tower.full_attention_layers;
    std::sort(layers.begin(), layers.end());
    const bool in_range =
        !layers.empty() && layers.front() >= 0 && layers.back() < tower.depth;
    const bool unique =
        std::adjacent_find(layers.begin(), layers.end()) == layers.end();
    FRAMESHARD_CHECK(
        in_range && unique,
        fn,
        "expected ",
        tower.name,
        ".full_attention_layers to be at least one distinct layer index in "
        "[0, ",
        tower.depth,
        ") when window_patches > 0, got ",
        tower.full_attention_layers.size(),
        " entries");
  }
  FRAMESHARD_CHECK(
      tower.mergers >= 0 && (tower.mergers == 0 ||
                             (tower.merge_size > 0 && tower.out_hidden > 0)),
      fn,
      "expected ",
      tower.name,
      ".mergers >= 0 and, with mergers, merge_size > 0 and out_hidden > 0, "
      "got mergers=",
      tower.mergers,
      ", merge_size=",
      tower.merge_size,
      ", out_hidden=",
      tower.out_hidden);
  FRAMESHARD_CHECK(
      tower.prefix_tokens >= 0 && tower.merger_hidden >= 0,
      fn,
      "expected ",
      tower.name,
      ".prefix_tokens >= 0 and .merger_hidden >= 0, got ",
      tower.prefix_tokens,
      " and ",
      tower.merger_hidden);
  const double d = static_cast<double>(tower.hidden);
  const double f = static_cast<double>(tower.intermediate);
  const double per_layer = 2.0 * d + (tower.gated_mlp ? 1.5 * f : f);
  const double mm = static_cast<double>(tower.merge_size * tower.merge_size);
  // p/m^2 merged tokens through d*m^2 -> h -> o, in units of 2d: with
  // Qwen's h = d*m^2 this is (d*m^2 + o) / 2 per patch.
  const double h = tower.merger_hidden > 0
                       ? static_cast<double>(tower.merger_hidden)
                       : d * mm;
  const double per_merger =
      h * (d * mm + static_cast<double>(tower.out_hidden)) / (mm * 2.0 * d);
  const double full = static_cast<double>(tower.full_layers());
  CostModel m;
  m.a = 1.0;
  const double layers = static_cast<double>(tower.depth) * per_layer / full;
  const double mergers = static_cast<double>(tower.mergers) * per_merger / full;
  // Prefix tokens: (p + P)^2 + layers (p + P) + mergers p (see the banner).
  const double prefix = static_cast<double>(tower.prefix_tokens);
  m.b = layers + mergers + 2.0 * prefix;
  m.seconds_per_unit = 12.0 * d * full / kAssumedTowerFlops;
  m.c = prefix * prefix + layers * prefix;
  if (tower.window_patches > 0 && tower.window_layers() > 0) {
    m.window_coef = static_cast<double>(tower.window_layers()) / full;
    m.window = tower.window_patches;
  }
  m.label = tower.name + " FLOPs, " + alpha_text(m);
  return m;
}

CostModel automodel_cost_model(const TowerDims& tower) {
  FRAMESHARD_CHECK(
      tower.hidden >= 0,
      "automodel_cost_model",
      "expected ",
      tower.name,
      ".hidden >= 0, got ",
      tower.hidden);
  CostModel m = CostModel::from_alpha(3.0 * static_cast<double>(tower.hidden));
  m.label = "automodel (3*hidden=" + std::to_string(3 * tower.hidden) + ")";
  return m;
}

CostModel parse_cost_alpha(
    const std::string& spec, const std::string& auto_tower, const char* field) {
  auto tower_or_fail = [&](const std::string& name) -> const TowerDims& {
    const TowerDims* t = find_preset(name);
    FRAMESHARD_CHECK(
        t != nullptr,
        "parse_cost_alpha",
        field,
        ": expected a tower preset (",
        preset_list(),
        "), got \"",
        name,
        "\"");
    return *t;
  };

  if (spec == "auto" || spec == kOnlineCost) {
    CostModel m = flop_cost_model(tower_or_fail(auto_tower));
    m.label = spec + " (" + m.label + ")";
    return m;
  }
  if (spec == "automodel") {
    return automodel_cost_model(tower_or_fail(auto_tower));
  }
  const std::string automodel_prefix = "automodel:";
  if (spec.compare(0, automodel_prefix.size(), automodel_prefix) == 0) {
    const std::string name = spec.substr(automodel_prefix.size());
    CostModel m = automodel_cost_model(tower_or_fail(name));
    m.label = "automodel:" + name +
              " (3*hidden=" + std::to_string(3 * tower_or_fail(name).hidden) +
              ")";
    return m;
  }
  const std::string quad_prefix = "quadratic:";
  if (spec.compare(0, quad_prefix.size(), quad_prefix) == 0) {
    const std::string rest = spec.substr(quad_prefix.size());
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
      const size_t comma = rest.find(',', start);
      parts.push_back(rest.substr(start, comma - start));
      if (comma == std::string::npos) {
        break;
      }
      start = comma + 1;
    }
    double coef[3] = {0.0, 0.0, 0.0};
    bool ok = parts.size() == 3;
    for (size_t i = 0; ok && i < 3; ++i) {
      ok = parse_nonneg_double(parts[i], coef[i]);
    }
    if (!ok) {
      bad_spec(field, spec);
    }
    return CostModel::quadratic(coef[0], coef[1], coef[2]);
  }
  if (find_preset(spec) != nullptr) {
    return flop_cost_model(*find_preset(spec));
  }
  int64_t alpha = 0;
  if (parse_nonneg_int(spec, alpha)) {
    return CostModel::from_alpha(static_cast<double>(alpha));
  }
  if (is_calibration_path(spec)) {
    return read_calibration(spec, field);
  }
  bad_spec(field, spec);
}

CostModel parse_cost_alpha(
    const std::string& spec, const TowerDims& running, const char* field) {
  if (spec == "auto" || spec == kOnlineCost) {
    CostModel m = flop_cost_model(running);
    m.label =
        spec + " (" + running.describe() + " FLOPs, " + alpha_text(m) + ")";
    return m;
  }
  if (spec == "automodel") {
    return automodel_cost_model(running);
  }
  return parse_cost_alpha(spec, std::string("qwen3-vl"), field);
}

}  // namespace frameshard
