// Shared building blocks of the Qwen-VL-family vision towers (private; the
// per-family files qwen2_vl.cpp, qwen2_5_vl.cpp and qwen3_vl.cpp assemble
// them, the llama.cpp tools/mtmd shape): numerics, the modules and the
// assembly; the index math they run on is qwen_geometry.h. Module and
// parameter names are Hugging Face's, so named_parameters() of a tower are
// the checkpoint names below its prefix.
#pragma once

#include <frameshard/frames.h>
#include <frameshard/models/qwen_towers.h>

#include "models/qwen_geometry.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace models {
namespace detail {

// ------------------------------------------------------------ numerics

/// Where HF upcasts (softmax, rotary, RMSNorm, interpolation weights):
/// float64 stays float64, everything else runs in float32.
at::ScalarType accum_dtype(at::ScalarType dtype);

enum class Activation { kGelu, kGeluTanh, kQuickGelu, kSilu, kRelu };
/// HF ACT2FN names: gelu, gelu_pytorch_tanh (and gelu_new, gelu_fast,
/// gelu_python_tanh... only the exact ones are accepted), quick_gelu,
/// silu/swish, relu. `fn` names the caller in the error.
Activation parse_activation(const std::string& name, const char* fn);
at::Tensor activate(Activation act, const at::Tensor& x);

// ------------------------------------------------------------ modules

/// kRMSNorm: HF's Qwen RMSNorm (normalise in float32, cast back, scale);
/// kRMSNormScaleInFloat: Nemotron Omni's (the scale also in float32, then
/// cast back).
enum class NormKind { kLayerNorm, kRMSNorm, kRMSNormScaleInFloat };

/// LayerNorm (weight, bias) or an RMSNorm (weight), eps 1e-6 by default.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(int64_t dim, NormKind kind, double eps = 1e-6);
  at::Tensor forward(const at::Tensor& x);

 private:
  NormKind kind_;
  double eps_;
  int64_t dim_;
  at::Tensor weight_, bias_;
};
TORCH_MODULE(Norm);

/// HF's Conv3d patch embedding as a Linear over the flattened row:
/// "proj.weight" [dim, C, T, P, P] (+ "proj.bias").
class PatchEmbedImpl : public torch::nn::Module {
 public:
  PatchEmbedImpl(
      int64_t in_channels,
      int64_t temporal_patch_size,
      int64_t patch_size,
      int64_t dim,
      bool bias);
  at::Tensor forward(const at::Tensor& pixels);

 private:
  int64_t dim_;
  at::Tensor weight_, bias_;
};

/// Parameter names of the MLP: fc1/fc2 (Qwen2-VL), gate_proj/up_proj/
/// down_proj with act(gate) * up (Qwen2.5-VL), linear_fc1/linear_fc2
/// (Qwen3-VL).
enum class MlpStyle { kFc, kGated, kLinearFc };

class VisionMlpImpl : public torch::nn::Module {
 public:
  VisionMlpImpl(int64_t dim, int64_t hidden, Activation act, MlpStyle style);
  at::Tensor forward(const at::Tensor& x);

 private:
  Activation act_;
  MlpStyle style_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, up_{nullptr};
};
TORCH_MODULE(VisionMlp);

/// Split frames in a full-attention layer: the local frames that are pieces
/// (segment i of `cu` is local frame i there) and the exchange bringing
/// each piece its whole frame's keys and values. Inactive (the default, and
/// in window layers): attention stays inside the segments.
struct SplitAttention {
  const std::vector<FramePiece>* pieces = nullptr;
  const PieceExchange* exchange = nullptr;
  bool active() const {
    return exchange != nullptr && static_cast<bool>(*exchange);
  }
};

/// The SplitAttention of a tower input (inactive unless input.exchange is
/// set); refers to `input` and `geo`, which must outlive it.
SplitAttention split_attention(
    const TowerInput& input, const FrameGeometry& geo);

/// Multi-head self-attention ("qkv", "proj") with 2-D rotary q/k (none when
/// the tables are undefined: RADIO's absolute positions), strictly
/// inside the segments of `cu` (HF's eager path, one segment at a time;
/// equal consecutive segments run as one batched matmul). With an active
/// `split`, every rank exchanges its rotated keys and values once (all
/// local rows, [rows, 2 * dim]) and a piece's queries attend to its whole
/// frame's keys and values.
class VisionAttentionImpl : public torch::nn::Module {
 public:
  VisionAttentionImpl(int64_t dim, int64_t heads);
  at::Tensor forward(
      const at::Tensor& x,
      const Rotary& rotary,
      const std::vector<int64_t>& cu,
      const SplitAttention& split = {});

 private:
  int64_t dim_, heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(VisionAttention);

/// Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)). With
/// `layer_scale` (RADIO) each branch is scaled by its "layer_scale<i>.lambda1"
/// vector before the residual add.
class VisionBlockImpl : public torch::nn::Module {
 public:
  VisionBlockImpl(
      int64_t dim,
      int64_t heads,
      int64_t mlp_hidden,
      NormKind norm,
      Activation act,
      MlpStyle mlp,
      double norm_eps = 1e-6,
      bool layer_scale = false);
  at::Tensor forward(
      const at::Tensor& x,
      const Rotary& rotary,
      const std::vector<int64_t>& cu,
      const SplitAttention& split = {});

 private:
  Norm norm1_{nullptr}, norm2_{nullptr};
  VisionAttention attn_{nullptr};
  VisionMlp mlp_{nullptr};
  at::Tensor scale1_, scale2_;  // undefined without layer scale
};

/// Parameter names of the merger: "ln_q" + "mlp.0"/"mlp.2" (Qwen2-VL,
/// Qwen2.5-VL) or "norm" + "linear_fc1"/"linear_fc2" (Qwen3-VL).
enum class MergerStyle { kLnQ, kLinearFc };

/// norm, merge x merge rows -> one, Linear, exact GELU, Linear to `out`.
/// `postshuffle`: the norm runs over the merged width (DeepStack mergers).
class PatchMergerImpl : public torch::nn::Module {
 public:
  PatchMergerImpl(
      int64_t dim,
      int64_t out,
      int64_t merge,
      NormKind norm,
      MergerStyle style,
      bool postshuffle);
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t merged_dim_;
  bool postshuffle_;
  Norm norm_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// ------------------------------------------------------------ assembly

/// What sets one Qwen tower apart at construction: the checked sizes, the
/// activation and the parameter-name styles. Each family file maps its
/// config onto one (its spec_of) and assembles the tower from the builders
/// below, in HF's registration order (which is also the order in which the
/// modules draw their initial values from the global RNG).
struct TowerSpec {
  const char* name = "";  // error prefix: "frameshard::<name>: ..."
  int64_t depth = 0;
  int64_t dim = 0;  // tower width
  int64_t heads = 0;
  int64_t mlp_hidden = 0;
  int64_t out = 0;  // merger output width
  int64_t in_channels = 0;
  int64_t patch_size = 0;
  int64_t temporal_patch_size = 0;
  int64_t merge = 0;
  double rope_theta = 10000.0;
  std::string hidden_act;
  bool patch_bias = false;
  NormKind norm = NormKind::kLayerNorm;
  MlpStyle mlp = MlpStyle::kFc;
  MergerStyle merger = MergerStyle::kLnQ;
  double norm_eps = 1e-6;    // the blocks' norms (RADIO: layer_norm_eps)
  bool layer_scale = false;  // RADIO's layer_scale1/2.lambda1
};

/// The spec fields every family's config names alike (HF's names); the
/// family file fills in the rest (widths, bias, styles).
template <typename Config>
TowerSpec common_spec(const Config& c, const char* name) {
  TowerSpec s;
  s.name = name;
  s.depth = c.depth;
  s.heads = c.num_heads;
  s.in_channels = c.in_channels;
  s.patch_size = c.patch_size;
  s.temporal_patch_size = c.temporal_patch_size;
  s.merge = c.spatial_merge_size;
  s.rope_theta = c.rope_theta;
  s.hidden_act = c.hidden_act;
  return s;
}

/// Shared size checks (positive sizes, heads dividing the width, a head
/// dim divisible by 4 for the 2-D rotary unless `rotary` is false). Family
/// checks that divide by these sizes must run after it.
void check_tower_spec(const TowerSpec& spec, bool rotary = true);

/// "patch_embed" of `owner`.
std::shared_ptr<PatchEmbedImpl> register_patch_embed(
    torch::nn::Module& owner, const TowerSpec& spec);

/// spec.depth blocks as "blocks.<i>" of `owner`; parses spec.hidden_act.
std::vector<std::shared_ptr<VisionBlockImpl>> register_blocks(
    torch::nn::Module& owner, const TowerSpec& spec);

/// A merger of spec's widths, norm and names (not registered: "merger" is
/// one, Qwen3-VL's DeepStack list holds postshuffle ones).
std::shared_ptr<PatchMergerImpl> make_merger(
    const TowerSpec& spec, bool postshuffle);

/// Rotary tables for patch coordinates `coords` (patch_coordinates), on
/// x's device in x's accumulation dtype, with spec's head dim and theta.
Rotary tower_rotary(
    const TowerSpec& spec, const at::Tensor& coords, const at::Tensor& x);

/// Position of layer `i` in `layers` (fullatt_block_indexes,
/// deepstack_visual_indexes), or -1 when it is not listed.
int64_t layer_slot(const std::vector<int64_t>& layers, size_t i);

/// The VisionTower calling `impl`'s forward (keeps the module alive).
template <typename Impl>
VisionTower tower_function(std::shared_ptr<Impl> impl) {
  return [impl](const TowerInput& input) { return impl->forward(input); };
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
