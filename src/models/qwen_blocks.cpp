// Shared blocks of the Qwen-VL-family vision towers (see qwen_blocks.h).
// Numerics mirror transformers' eager path op by op where the order of
// floating-point operations matters (softmax and RMSNorm dtypes; rotary
// tables and interpolation weights are qwen_geometry.cpp).
#include "models/qwen_blocks.h"

#include <frameshard/models/qwen_config.h>

#include "tower/check.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace frameshard {
namespace models {
namespace detail {

at::ScalarType accum_dtype(at::ScalarType dtype) {
  return dtype == at::kDouble ? at::kDouble : at::kFloat;
}

Activation parse_activation(const std::string& name, const char* fn) {
  if (name == "gelu") {
    return Activation::kGelu;
  }
  // gelu_new / gelu_python_tanh are the same tanh formula written out in
  // Python; they agree with the fused kernel to float rounding.
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" ||
      name == "gelu_python_tanh") {
    return Activation::kGeluTanh;
  }
  if (name == "quick_gelu") {
    return Activation::kQuickGelu;
  }
  if (name == "silu" || name == "swish") {
    return Activation::kSilu;
  }
  if (name == "relu") {
    return Activation::kRelu;
  }
  FRAMESHARD_TORCH_CHECK(
      false,
      fn,
      "expected hidden_act gelu, gelu_pytorch_tanh, gelu_new, quick_gelu, "
      "silu, swish or relu, got \"",
      name,
      "\"");
}

at::Tensor activate(Activation act, const at::Tensor& x) {
  switch (act) {
    case Activation::kGelu:
      return at::gelu(x);
    case Activation::kGeluTanh:
      return at::gelu(x, "tanh");
    case Activation::kQuickGelu:
      return x * at::sigmoid(1.702 * x);
    case Activation::kSilu:
      return at::silu(x);
    case Activation::kRelu:
      return at::relu(x);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown activation");
}

// ------------------------------------------------------------ modules

NormImpl::NormImpl(int64_t dim, NormKind kind, double eps)
    : kind_(kind), eps_(eps), dim_(dim) {
  weight_ = register_parameter("weight", at::ones({dim}));
  if (kind == NormKind::kLayerNorm) {
    bias_ = register_parameter("bias", at::zeros({dim}));
  }
}

at::Tensor NormImpl::forward(const at::Tensor& x) {
  if (kind_ == NormKind::kLayerNorm) {
    return at::layer_norm(x, {dim_}, weight_, bias_, eps_);
  }
  // HF's RMSNorm: normalise in float32, cast back, then scale (Nemotron
  // Omni's scales in float32 and casts the product).
  const at::ScalarType acc = accum_dtype(x.scalar_type());
  at::Tensor h = x.to(acc);
  h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  if (kind_ == NormKind::kRMSNormScaleInFloat) {
    return (weight_.to(acc) * h).to(x.scalar_type());
  }
  return weight_ * h.to(x.scalar_type());
}

PatchEmbedImpl::PatchEmbedImpl(
    int64_t in_channels,
    int64_t temporal_patch_size,
    int64_t patch_size,
    int64_t dim,
    bool bias)
    : dim_(dim) {
  auto proj = std::make_shared<torch::nn::Module>();
  register_module("proj", proj);
  const int64_t fan_in =
      in_channels * temporal_patch_size * patch_size * patch_size;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  // Conv3d's default initialisation (kaiming_uniform, a = sqrt(5)).
  weight_ = proj->register_parameter(
      "weight",
      at::empty({dim, in_channels, temporal_patch_size, patch_size, patch_size})
          .uniform_(-bound, bound));
  if (bias) {
    bias_ = proj->register_parameter(
        "bias", at::empty({dim}).uniform_(-bound, bound));
  }
}

at::Tensor PatchEmbedImpl::forward(const at::Tensor& pixels) {
  // Conv3d with kernel == stride over one (C, T, P, P) patch is a Linear
  // over the flattened row, whose feature order is (C, T, P, P).
  const at::Tensor x = pixels.to(weight_.scalar_type());
  const c10::optional<at::Tensor> bias =
      bias_.defined() ? c10::optional<at::Tensor>(bias_) : c10::nullopt;
  return at::linear(x, weight_.reshape({dim_, -1}), bias);
}

VisionMlpImpl::VisionMlpImpl(
    int64_t dim, int64_t hidden, Activation act, MlpStyle style)
    : act_(act), style_(style) {
  switch (style) {
    case MlpStyle::kFc:
      fc1_ = register_module("fc1", torch::nn::Linear(dim, hidden));
      fc2_ = register_module("fc2", torch::nn::Linear(hidden, dim));
      break;
    case MlpStyle::kLinearFc:
      fc1_ = register_module("linear_fc1", torch::nn::Linear(dim, hidden));
      fc2_ = register_module("linear_fc2", torch::nn::Linear(hidden, dim));
      break;
    case MlpStyle::kGated:
      fc1_ = register_module("gate_proj", torch::nn::Linear(dim, hidden));
      up_ = register_module("up_proj", torch::nn::Linear(dim, hidden));
      fc2_ = register_module("down_proj", torch::nn::Linear(hidden, dim));
      break;
  }
}

at::Tensor VisionMlpImpl::forward(const at::Tensor& x) {
  if (style_ == MlpStyle::kGated) {
    return fc2_(activate(act_, fc1_(x)) * up_(x));
  }
  return fc2_(activate(act_, fc1_(x)));
}

VisionAttentionImpl::VisionAttentionImpl(int64_t dim, int64_t heads)
    : dim_(dim), heads_(heads) {
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

namespace {

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// q or k [rows, heads, head_dim], rotated in the tables' dtype (float32, as
// HF's apply_rotary_pos_emb_vision), returned in x's dtype.
at::Tensor apply_rotary(const at::Tensor& x, const Rotary& r) {
  if (!r.cos.defined()) {
    return x;  // a tower without rotary (RADIO)
  }
  const at::Tensor xf = x.to(r.cos.scalar_type());
  const at::Tensor cos = r.cos.unsqueeze(-2);
  const at::Tensor sin = r.sin.unsqueeze(-2);
  return (xf * cos + rotate_half(xf) * sin).to(x.scalar_type());
}

// Bound on one batched score tensor (elements): long frames run one at a
// time, small ones in batches.
constexpr int64_t kMaxScoreElements = int64_t(1) << 26;

}  // namespace

SplitAttention split_attention(
    const TowerInput& input, const FrameGeometry& geo) {
  SplitAttention split;
  // Without the exchange a piece would attend within itself only: wrong
  // values, silently.
  TORCH_CHECK(
      input.pieces.empty() || input.exchange,
      "frameshard: expected TowerInput::exchange with ",
      input.pieces.size(),
      " pieces of split frames, got none (encode sets it; a caller of "
      "local_tower_input running a split plan must too)");
  if (input.exchange) {
    split.pieces = &geo.pieces;
    split.exchange = &input.exchange;
  }
  return split;
}

namespace {

// Per segment of `cu`: the index of its piece among `split`'s pieces, or -1
// when the segment is a whole frame (or nothing is split).
std::vector<int64_t> piece_slots(
    const SplitAttention& split, const std::vector<int64_t>& cu) {
  std::vector<int64_t> slot(cu.size() - 1, -1);
  if (split.active()) {
    for (size_t j = 0; j < split.pieces->size(); ++j) {
      slot[static_cast<size_t>((*split.pieces)[j].frame)] =
          static_cast<int64_t>(j);
    }
  }
  return slot;
}

// One attention call: a piece alone (`piece`), or `count` consecutive whole
// segments of one length `n`, run as one batch.
struct AttentionGroup {
  int64_t first = 0;  // segment
  int64_t count = 1;
  int64_t n = 0;  // rows per segment
  bool piece = false;
};

std::vector<AttentionGroup> attention_groups(
    const std::vector<int64_t>& cu,
    const std::vector<int64_t>& slot,
    int64_t heads) {
  std::vector<AttentionGroup> groups;
  const auto segments = static_cast<int64_t>(cu.size()) - 1;
  int64_t s = 0;
  while (s < segments) {
    const int64_t n = cu[s + 1] - cu[s];
    if (slot[static_cast<size_t>(s)] >= 0) {
      groups.push_back({s, 1, n, true});
      ++s;
      continue;
    }
    // Each batch entry is computed on its own (no attention across
    // segments); the batch is capped so that its scores stay bounded.
    const int64_t max_batch = std::max<int64_t>(
        1, kMaxScoreElements / std::max<int64_t>(1, heads * n * n));
    int64_t e = s + 1;
    while (e < segments && e - s < max_batch && cu[e + 1] - cu[e] == n &&
           slot[static_cast<size_t>(e)] < 0) {
      ++e;
    }
    groups.push_back({s, e - s, n, false});
    s = e;
  }
  return groups;
}

// The rows of every group of `t` (and any rows outside `cu` at either end,
// unused), from one split: its backward is one cat. A narrow per group would
// give every group's backward a zero-filled gradient of all rows, summed by
// autograd: O(groups x rows) per tensor and layer, which made a batch of many
// frames cost more than linearly (RADIO's A/B ran 0.34 of replicated at CP 2).
std::vector<at::Tensor> group_rows(
    const at::Tensor& t,
    const std::vector<int64_t>& cu,
    const std::vector<AttentionGroup>& groups) {
  std::vector<int64_t> sizes;
  sizes.reserve(groups.size() + 2);
  sizes.push_back(cu.front());
  for (const AttentionGroup& g : groups) {
    sizes.push_back(g.count * g.n);
  }
  sizes.push_back(t.size(0) - cu.back());
  std::vector<at::Tensor> parts = t.split_with_sizes(sizes, 0);
  return {parts.begin() + 1, parts.end() - 1};
}

}  // namespace

at::Tensor VisionAttentionImpl::forward(
    const at::Tensor& x,
    const Rotary& rotary,
    const std::vector<int64_t>& cu,
    const SplitAttention& split) {
  const int64_t rows = x.size(0);
  const int64_t hd = dim_ / heads_;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor qkv = qkv_(x).reshape({rows, 3, heads_, hd});
  const at::Tensor q = apply_rotary(qkv.select(1, 0), rotary);
  at::Tensor k = apply_rotary(qkv.select(1, 1), rotary);
  at::Tensor v = qkv.select(1, 2);
  // [batch, heads, n, hd] from [batch * n, heads, hd] rows.
  auto heads_first = [&](const at::Tensor& t, int64_t batch, int64_t n) {
    return t.reshape({batch, n, heads_, hd}).permute({0, 2, 1, 3});
  };

  // Split frames: every rank exchanges once per full-attention layer, with
  // or without pieces of its own (the exchange is collective).
  std::vector<at::Tensor> whole_kv;  // local rows, then one per piece
  if (split.active()) {
    whole_kv = (*split.exchange)(
        at::cat({k.reshape({rows, dim_}), v.reshape({rows, dim_})}, 1));
    TORCH_CHECK(
        whole_kv.size() == split.pieces->size() + 1,
        "frameshard::VisionAttention: expected the exchange to return the "
        "local rows and one tensor per piece (",
        split.pieces->size() + 1,
        "), got ",
        whole_kv.size());
    k = whole_kv[0].narrow(1, 0, dim_).reshape({rows, heads_, hd});
    v = whole_kv[0].narrow(1, dim_, dim_).reshape({rows, heads_, hd});
  }
  const std::vector<int64_t> slot = piece_slots(split, cu);

  const std::vector<AttentionGroup> groups = attention_groups(cu, slot, heads_);
  const std::vector<at::Tensor> qs = group_rows(q, cu, groups);
  const std::vector<at::Tensor> ks = group_rows(k, cu, groups);
  const std::vector<at::Tensor> vs = group_rows(v, cu, groups);
  std::vector<at::Tensor> pieces;
  for (size_t i = 0; i < groups.size(); ++i) {
    const AttentionGroup& g = groups[i];
    if (g.piece) {
      // A piece: its queries against the whole frame's keys and values.
      const at::Tensor& kv =
          whole_kv[static_cast<size_t>(slot[static_cast<size_t>(g.first)]) + 1];
      const int64_t whole = kv.size(0);
      at::Tensor o = at::scaled_dot_product_attention(
          heads_first(qs[i], 1, g.n),
          heads_first(kv.narrow(1, 0, dim_), 1, whole),
          heads_first(kv.narrow(1, dim_, dim_), 1, whole),
          {},
          0.0,
          false,
          scale);
      pieces.push_back(o.permute({0, 2, 1, 3}).reshape({g.n, dim_}));
    } else if (g.n > 0) {
      // Fused attention (torch's SDPA: the flash kernel on CPU and CUDA)
      // never materialises the [n, n] scores; it accumulates the softmax in
      // float32 for bfloat16/float16 inputs, as HF's eager path does.
      at::Tensor o = at::scaled_dot_product_attention(
          heads_first(qs[i], g.count, g.n),
          heads_first(ks[i], g.count, g.n),
          heads_first(vs[i], g.count, g.n),
          {},
          0.0,
          false,
          scale);  // [b, h, n, hd]
      pieces.push_back(o.permute({0, 2, 1, 3}).reshape({g.count * g.n, dim_}));
    }
  }
  at::Tensor attended =
      pieces.empty() ? at::zeros({0, dim_}, x.options()) : at::cat(pieces, 0);
  return proj_(attended);
}

VisionBlockImpl::VisionBlockImpl(
    int64_t dim,
    int64_t heads,
    int64_t mlp_hidden,
    NormKind norm,
    Activation act,
    MlpStyle mlp,
    double norm_eps,
    bool layer_scale) {
  norm1_ = register_module("norm1", Norm(dim, norm, norm_eps));
  norm2_ = register_module("norm2", Norm(dim, norm, norm_eps));
  attn_ = register_module("attn", VisionAttention(dim, heads));
  mlp_ = register_module("mlp", VisionMlp(dim, mlp_hidden, act, mlp));
  if (layer_scale) {  // HF registers them after the branch they scale
    scale1_ =
        register_module("layer_scale1", std::make_shared<torch::nn::Module>())
            ->register_parameter("lambda1", at::ones({dim}));
    scale2_ =
        register_module("layer_scale2", std::make_shared<torch::nn::Module>())
            ->register_parameter("lambda1", at::ones({dim}));
  }
}

at::Tensor VisionBlockImpl::forward(
    const at::Tensor& x,
    const Rotary& rotary,
    const std::vector<int64_t>& cu,
    const SplitAttention& split) {
  at::Tensor a = attn_->forward(norm1_(x), rotary, cu, split);
  at::Tensor h = x + (scale1_.defined() ? a * scale1_ : a);
  at::Tensor m = mlp_(norm2_(h));
  return h + (scale2_.defined() ? m * scale2_ : m);
}

PatchMergerImpl::PatchMergerImpl(
    int64_t dim,
    int64_t out,
    int64_t merge,
    NormKind norm,
    MergerStyle style,
    bool postshuffle)
    : merged_dim_(dim * merge * merge), postshuffle_(postshuffle) {
  const int64_t norm_dim = postshuffle ? merged_dim_ : dim;
  if (style == MergerStyle::kLnQ) {
    norm_ = register_module("ln_q", Norm(norm_dim, norm));
    // HF: nn.Sequential(Linear, GELU, Linear) -> "mlp.0", "mlp.2".
    auto mlp = std::make_shared<torch::nn::Module>();
    register_module("mlp", mlp);
    fc1_ =
        mlp->register_module("0", torch::nn::Linear(merged_dim_, merged_dim_));
    fc2_ = mlp->register_module("2", torch::nn::Linear(merged_dim_, out));
  } else {
    norm_ = register_module("norm", Norm(norm_dim, norm));
    fc1_ = register_module(
        "linear_fc1", torch::nn::Linear(merged_dim_, merged_dim_));
    fc2_ = register_module("linear_fc2", torch::nn::Linear(merged_dim_, out));
  }
}

at::Tensor PatchMergerImpl::forward(const at::Tensor& x) {
  at::Tensor y = postshuffle_ ? norm_(x.reshape({-1, merged_dim_}))
                              : norm_(x).reshape({-1, merged_dim_});
  return fc2_(at::gelu(fc1_(y)));
}

namespace {

// The parameters a tower of this spec allocates, in double (the widths are
// each at most 2^16, their products overflow int64): per block the
// attention (4 dim^2) and the MLP (2, or 3 when gated, dim x mlp_hidden);
// the patch embedding (dim x patch features); the merger ((dim merge^2)^2 +
// dim merge^2 x out). Norms and biases are lower order.
double tower_parameters(const TowerSpec& s) {
  const double dim = static_cast<double>(s.dim);
  const double mlp = static_cast<double>(s.mlp_hidden);
  const double merge = static_cast<double>(s.merge);
  const double merged = dim * merge * merge;
  const double mlp_mats = s.mlp == MlpStyle::kGated ? 3 : 2;
  const double patch = static_cast<double>(s.in_channels) *
                       static_cast<double>(s.temporal_patch_size) *
                       static_cast<double>(s.patch_size) *
                       static_cast<double>(s.patch_size);
  return static_cast<double>(s.depth) * (4 * dim * dim + mlp_mats * dim * mlp) +
         dim * patch + merged * merged + merged * static_cast<double>(s.out);
}

}  // namespace

void check_tower_spec(const TowerSpec& spec, bool rotary) {
  const TowerSpec& s = spec;
  // Before any module allocates: a config.json within every per-field limit
  // (depth 256, widths 65536) can still ask for terabytes.
  const double params = tower_parameters(s);
  FRAMESHARD_TORCH_CHECK(
      params <= static_cast<double>(kMaxTowerParameters),
      s.name,
      "expected a tower of at most ",
      kMaxTowerParameters,
      " parameters (the largest released Qwen tower has about 0.7e9), got "
      "about ",
      params,
      " (depth ",
      s.depth,
      ", width ",
      s.dim,
      ", MLP ",
      s.mlp_hidden,
      ", merge ",
      s.merge,
      ", output ",
      s.out,
      ")");
  FRAMESHARD_TORCH_CHECK(
      s.depth >= 1 && s.dim > 0 && s.mlp_hidden > 0 && s.out > 0 &&
          s.in_channels > 0 && s.patch_size > 0 && s.temporal_patch_size > 0 &&
          s.merge > 0,
      s.name,
      "expected depth >= 1 and positive width, MLP width, output width, "
      "channels, patch sizes and merge size, got depth ",
      s.depth,
      ", width ",
      s.dim,
      ", MLP ",
      s.mlp_hidden,
      ", output ",
      s.out,
      ", channels ",
      s.in_channels,
      ", patch ",
      s.patch_size,
      ", temporal patch ",
      s.temporal_patch_size,
      ", merge ",
      s.merge);
  FRAMESHARD_TORCH_CHECK(
      s.heads > 0 && s.dim % s.heads == 0 &&
          (!rotary || (s.dim / s.heads) % 4 == 0),
      s.name,
      "expected num_heads dividing the width ",
      s.dim,
      rotary ? " into heads of a size divisible by 4 (2-D rotary)" : "",
      ", got num_heads ",
      s.heads);
}

std::shared_ptr<PatchEmbedImpl> register_patch_embed(
    torch::nn::Module& owner, const TowerSpec& spec) {
  return owner.register_module(
      "patch_embed",
      std::make_shared<PatchEmbedImpl>(
          spec.in_channels,
          spec.temporal_patch_size,
          spec.patch_size,
          spec.dim,
          spec.patch_bias));
}

std::vector<std::shared_ptr<VisionBlockImpl>> register_blocks(
    torch::nn::Module& owner, const TowerSpec& spec) {
  const Activation act = parse_activation(spec.hidden_act, spec.name);
  torch::nn::ModuleList list;
  std::vector<std::shared_ptr<VisionBlockImpl>> blocks;
  for (int64_t i = 0; i < spec.depth; ++i) {
    auto b = std::make_shared<VisionBlockImpl>(
        spec.dim,
        spec.heads,
        spec.mlp_hidden,
        spec.norm,
        act,
        spec.mlp,
        spec.norm_eps,
        spec.layer_scale);
    list->push_back(b);
    blocks.push_back(b);
  }
  owner.register_module("blocks", list);
  return blocks;
}

std::shared_ptr<PatchMergerImpl> make_merger(
    const TowerSpec& spec, bool postshuffle) {
  return std::make_shared<PatchMergerImpl>(
      spec.dim, spec.out, spec.merge, spec.norm, spec.merger, postshuffle);
}

Rotary tower_rotary(
    const TowerSpec& spec, const at::Tensor& coords, const at::Tensor& x) {
  // Built on the CPU, where the coordinates are (no device sync), then moved.
  const Rotary r = rotary_tables(
      coords.cpu(),
      spec.dim / spec.heads,
      spec.rope_theta,
      accum_dtype(x.scalar_type()));
  return {r.cos.to(x.device()), r.sin.to(x.device())};
}

int64_t layer_slot(const std::vector<int64_t>& layers, size_t i) {
  auto it = std::find(layers.begin(), layers.end(), static_cast<int64_t>(i));
  return it == layers.end() ? -1 : static_cast<int64_t>(it - layers.begin());
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
