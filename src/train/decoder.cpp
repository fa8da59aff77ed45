// The CP decoder: pre-norm blocks with rotary attention over global
// positions (cp_causal_attention) and a SwiGLU MLP.
#include <frameshard/train/decoder.h>

#include <frameshard/train/cp_attention.h>

#include "tower/check.h"
#include "tower/exact_trig.h"

#include <string>

namespace frameshard {
namespace train {
namespace {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor x32 =
      x.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  at::Tensor y = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
  return y.to(x.scalar_type()) * w;
}

// Rotary tables [n, dim] of `positions` (global) in the half-split form
// (rotate_half), angles in float32 or float64: computed once per decoder
// forward, shared by every block's q and k.
struct RopeTable {
  at::Tensor cos, sin;
};

RopeTable rope_table(
    const at::Tensor& positions,
    int64_t dim,
    double theta,
    at::ScalarType dtype) {
  const auto ft = dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor inv = at::pow(
      theta,
      -at::arange(0, dim, 2, positions.options().dtype(ft)) /
          static_cast<double>(dim));
  at::Tensor ang = positions.to(ft).unsqueeze(1) * inv.unsqueeze(0);
  // cos and sin from libm on the CPU (tower/exact_trig.h: torch's CPU cos
  // was seen off by 1.5e-4 in one thread's chunk); torch's on a GPU.
  at::Tensor c;
  at::Tensor s;
  if (ang.is_cpu()) {
    const ::frameshard::detail::CosSin trig =
        ::frameshard::detail::exact_cos_sin(ang);
    c = trig.cos;
    s = trig.sin;
  } else {
    c = ang.cos();
    s = ang.sin();
  }
  return {at::cat({c, c}, 1).to(dtype), at::cat({s, s}, 1).to(dtype)};
}

// x [heads, n, dim] rotated by `rope`.
at::Tensor rotary(const at::Tensor& x, const RopeTable& rope) {
  const int64_t dim = x.size(2);
  at::Tensor x1 = x.narrow(2, 0, dim / 2);
  at::Tensor x2 = x.narrow(2, dim / 2, dim - dim / 2);
  at::Tensor rotated = at::cat({-x2, x1}, 2);
  return x * rope.cos + rotated * rope.sin;
}

}  // namespace

namespace detail {

class DecoderBlockImpl : public torch::nn::Module {
 public:
  explicit DecoderBlockImpl(const DecoderConfig& c) : config_(c) {
    auto linear = [](int64_t in, int64_t out) {
      return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
    };
    norm1_ = register_parameter("attn_norm", torch::ones({c.hidden}));
    norm2_ = register_parameter("mlp_norm", torch::ones({c.hidden}));
    qkv_ = register_module("qkv", linear(c.hidden, 3 * c.hidden));
    out_ = register_module("out", linear(c.hidden, c.hidden));
    gate_up_ = register_module("gate_up", linear(c.hidden, 2 * c.ffn));
    down_ = register_module("down", linear(c.ffn, c.hidden));
  }

  at::Tensor forward(
      const at::Tensor& x,
      const at::Tensor& positions,
      const RopeTable& rope,
      int64_t seq_len,
      const ProcessGroupPtr& cp_group) {
    const int64_t n = x.size(0);
    const int64_t h = config_.heads;
    const int64_t d = config_.hidden / h;
    at::Tensor qkv = qkv_->forward(rms_norm(x, norm1_, config_.norm_eps))
                         .reshape({n, 3, h, d})
                         .permute({1, 2, 0, 3});  // [3, heads, n, d]
    at::Tensor q = rotary(qkv[0], rope);
    at::Tensor k = rotary(qkv[1], rope);
    at::Tensor a = cp_causal_attention(
        q, k, qkv[2].contiguous(), positions, seq_len, cp_group);
    at::Tensor y = x + out_->forward(a.transpose(0, 1).reshape({n, h * d}));
    at::Tensor gu = gate_up_->forward(rms_norm(y, norm2_, config_.norm_eps));
    at::Tensor g = gu.narrow(1, 0, config_.ffn);
    at::Tensor u = gu.narrow(1, config_.ffn, config_.ffn);
    return y + down_->forward(at::silu(g) * u);
  }

 private:
  DecoderConfig config_;
  torch::Tensor norm1_, norm2_;
  torch::nn::Linear qkv_{nullptr}, out_{nullptr}, gate_up_{nullptr},
      down_{nullptr};
};

}  // namespace detail

DecoderImpl::DecoderImpl(const DecoderConfig& c) : config_(c) {
  FRAMESHARD_TORCH_CHECK(
      c.hidden > 0 && c.heads > 0 && c.hidden % c.heads == 0 &&
          (c.hidden / c.heads) % 2 == 0,
      "Decoder",
      "expected hidden divisible by heads into an even head dim, got hidden ",
      c.hidden,
      ", heads ",
      c.heads);
  embed_ = register_module(
      "embed",
      torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab, c.hidden)));
  // A ModuleList names its blocks "blocks.0", "blocks.1", ...
  torch::nn::ModuleList list;
  for (int64_t i = 0; i < c.layers; ++i) {
    blocks_.push_back(std::make_shared<detail::DecoderBlockImpl>(c));
    list->push_back(blocks_.back());
  }
  register_module("blocks", list);
  norm_weight_ = register_parameter("norm", torch::ones({c.hidden}));
  head_ = register_module(
      "head",
      torch::nn::Linear(
          torch::nn::LinearOptions(c.hidden, c.vocab).bias(false)));
}

at::Tensor DecoderImpl::embed(const at::Tensor& tokens) {
  return embed_->forward(tokens);
}

at::Tensor DecoderImpl::forward(
    at::Tensor hidden,
    const at::Tensor& positions,
    const std::vector<at::Tensor>& deepstack,
    int64_t seq_len,
    const ProcessGroupPtr& cp_group) {
  const RopeTable rope = rope_table(
      positions,
      config_.hidden / config_.heads,
      config_.rope_theta,
      hidden.scalar_type());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    hidden = blocks_[i]->forward(hidden, positions, rope, seq_len, cp_group);
    if (i < deepstack.size()) {
      hidden = hidden + deepstack[i];
    }
  }
  return head_->forward(rms_norm(hidden, norm_weight_, config_.norm_eps));
}

at::Tensor scatter_rows(
    const at::Tensor& base, const at::Tensor& rows, const at::Tensor& values) {
  return base.index_put({rows}, values.to(base.scalar_type()));
}

}  // namespace train
}  // namespace frameshard
