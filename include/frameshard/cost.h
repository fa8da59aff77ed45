// File: frameshard/cost.h
//
// The cost model: how much vision-tower work one frame unit of p patch rows
// costs, in arbitrary but consistent units. The default shape is
//
//   cost(p) = a*p^2 + b*p + c + window_coef * p * min(p, window)
//
// With a = 1, c = 0 and no window term this is the familiar p * (p + alpha).
// `alpha` by FLOP count (flop_cost_model), per transformer layer of width d
// and MLP width f, counting multiply-adds of one frame of p patches:
//   QKV + output projections  4*p*d^2
//   MLP                      2*p*d*f (plain) or 3*p*d*f (gated, SwiGLU)
//   attention (QK^T and AV)   2*p^2*d (full) or 2*p*min(p, window)*d
// and per merger (the patch merger, and each of Qwen3-VL's DeepStack
// mergers: an MLP d*m^2 -> d*m^2 -> o on every merged token of m^2 patches)
//   p*d*(d*m^2 + o)   (with an inner width h instead of d*m^2: p*h*(d + o/m^2))
// Summed over the tower and divided by 2*d*L_full (L_full = layers with
// full attention) this is
//   a = 1, b = (depth * (2d + f) + M * (d*m^2 + o) / 2) / L_full  (plain)
//          with 1.5 f for f in a gated MLP (SwiGLU)
//   window_coef = L_window / L_full, window = window patches,
// M mergers of output width o. Patch embedding is not counted (under 1 %
// of the tower for every preset). Qwen3-VL (d 1152, f 4304, plain, 27
// layers, 4 mergers to transformers' default o = 3584): alpha = 6608 + 606.8.
// A tower whose frames carry P prefix tokens (RADIO's cls and register
// tokens) runs its layers on p + P tokens and its mergers on p:
//   cost(p) = (p + P)^2 + b_layers (p + P) + b_mergers p
//           = p^2 + (2P + b) p + (P^2 + b_layers P),  b = b_layers + b_mergers
// The presets are transformers' class defaults (out_hidden 3584); a loaded
// checkpoint or module costs its own sizes (frameshard/models/cost_bridge.h,
// the Python package's frameshard.tower_dims).
// NeMo Automodel uses alpha = 3 * d (3456 for Qwen3-VL), which undercounts
// the linear work about 1.9x; it stays available as "automodel" for A/B.
// A calibrated a*p^2 + b*p + c fitted from timings is accepted too, written
// inline ("quadratic:a,b,c") or as the path of a `frameshard calibrate`
// file (frameshard/calibrate.h); its units are seconds.
//
// Seconds per cost unit (what the `auto` policy compares with the gather,
// frameshard/policy.h): 1 for calibrated and quadratic models (seconds by
// construction). For a FLOP model one unit is 2*d*L_full multiply-adds
// forward, 12*d*L_full FLOPs forward + backward, at an assumed sustained
// kAssumedTowerFlops = 100 TFLOP/s (an H100-class GPU in bf16 at about a
// third of its peak): a documented guess; calibrate to replace it. A bare
// alpha or "automodel" has no dimensions: 0 (unknown; the config then
// takes the units of its tower's FLOP model).
//
// Usage:
//   auto cm = frameshard::parse_cost_alpha("auto");        // Qwen3-VL FLOPs
//   auto cm2 = frameshard::parse_cost_alpha("qwen2.5-vl");  // window-aware
//   double c = cm(1024);
//
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frameshard {

/// Vision-tower dimensions the FLOP count needs (Hugging Face field names in
/// comments).
struct TowerDims {
  std::string name;
  int64_t depth = 0;         // depth
  int64_t hidden = 0;        // hidden_size / embed_dim
  int64_t intermediate = 0;  // intermediate_size (mlp_ratio * embed_dim)
  bool gated_mlp = false;    // SwiGLU (Qwen2.5-VL) vs plain GELU MLP
  // Window attention (Qwen2.5-VL): window size in pre-merge patches
  // ((window_size / patch_size)^2) and the layers that keep full attention.
  // window_patches == 0 means every layer attends over the whole frame.
  int64_t window_patches = 0;
  std::vector<int64_t> full_attention_layers;
  // Mergers: how many (1 + DeepStack layers; 0 leaves them uncounted), the
  // spatial merge size m (m^2 patches per merged token) and the width o
  // each merger projects to (out_hidden_size).
  int64_t mergers = 0;
  int64_t merge_size = 2;
  int64_t out_hidden = 0;
  // The mergers' inner width: 0 for Qwen's d*m^2; Nemotron Omni's projector
  // (after the 2 x 2 pixel shuffle) is d*m^2 -> projector_hidden_size -> o.
  int64_t merger_hidden = 0;
  // Prefix tokens every frame carries through every layer (RADIO's cls and
  // register tokens: num_cls_tokens + num_registers); 0 for Qwen towers.
  int64_t prefix_tokens = 0;

  int64_t full_layers() const;    // layers with full attention
  int64_t window_layers() const;  // depth - full_layers()
  /// "qwen3-vl depth 4, width 256, mlp 1024, 4 mergers to 512" (reports).
  std::string describe() const;
};

/// Named presets: "qwen2-vl", "qwen2.5-vl", "qwen3-vl" (8B/32B/30B-A3B/235B),
/// "qwen3-vl-small" (2B/4B), "qwen3.5", "radio" (Nemotron Omni's C-RADIO
/// with its pixel shuffle and projector). Throws frameshard::Error listing the
/// names for an unknown one.
const TowerDims& tower_preset(const std::string& name);
std::vector<std::string> tower_preset_names();

/// cost(p) = a*p^2 + b*p + c + window_coef * p * min(p, window).
struct CostModel {
  double a = 1.0;
  double b = 0.0;
  double c = 0.0;
  double window_coef = 0.0;
  int64_t window = 0;
  std::string label = "alpha=0";  // how it was chosen, for reports
  double seconds_per_unit = 0.0;  // 0: unknown (see the banner)

  double operator()(int64_t patch_rows) const;
  /// b + window_coef * window: the alpha of large frames (p >= window).
  double effective_alpha() const;

  /// p * (p + alpha).
  static CostModel from_alpha(double alpha);
  /// A calibrated quadratic in seconds (seconds_per_unit = 1).
  static CostModel quadratic(double a, double b, double c);
};

/// Sustained FLOP/s assumed to turn FLOP-model units into seconds.
constexpr double kAssumedTowerFlops = 100e12;

/// FLOP-derived model of a tower (formula in the banner).
CostModel flop_cost_model(const TowerDims& tower);
/// Automodel's rule: alpha = 3 * hidden.
CostModel automodel_cost_model(const TowerDims& tower);

/// The cost_alpha that learns from the run (frameshard/online_cost.h).
inline constexpr const char* kOnlineCost = "online";

/// Parses a cost_alpha spec:
///   "auto"               FLOP model of `auto_tower`
///   "online"             the same FLOP model, the start of an online model
///                        (the runtime then replaces it: online_cost.h)
///   "<n>"                alpha = n (non-negative integer)
///   "<preset>"           FLOP model of that tower preset
///   "automodel"          3 * hidden of `auto_tower`
///   "automodel:<preset>" 3 * hidden of that preset
///   "quadratic:a,b,c"    a calibrated a*p^2 + b*p + c (a, b, c >= 0)
///   "<path>"             a `frameshard calibrate` file (see
///                        is_calibration_path; e.g. "cal.txt")
/// Throws frameshard::Error naming `field` for anything else.
/// True when parse_cost_alpha reads `spec` as a calibration file's path:
/// it contains '/', or a '.' and no ':' and is not a number ("cal.txt",
/// not "1.5"); presets are matched first.
bool is_calibration_path(const std::string& spec);

CostModel parse_cost_alpha(
    const std::string& spec,
    const std::string& auto_tower = "qwen3-vl",
    const char* field = "cost_alpha");

/// parse_cost_alpha where "auto" and "automodel" count the tower that runs,
/// `running` (its dimensions read from the model itself), and every other
/// spec reads as above. The label names the dimensions ("auto (qwen3-vl
/// depth 4, width 256, ... FLOPs, alpha=...)").
CostModel parse_cost_alpha(
    const std::string& spec,
    const TowerDims& running,
    const char* field = "cost_alpha");

}  // namespace frameshard
