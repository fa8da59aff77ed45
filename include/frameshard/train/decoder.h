// File: frameshard/train/decoder.h
//
// The small decoder language model of the training job, with sequence
// context parallelism: pre-norm blocks (RMSNorm, multi-head attention with
// rotary positions of the GLOBAL token positions, SwiGLU MLP), a final norm
// and an untied LM head. Each rank runs it on its own load-balanced chunks
// (cp_attention.h); attention is the only cross-rank step.
//
// Visual embeddings replace the embeddings of the media positions before the
// first block; DeepStack features (Qwen3-VL) are added to the media
// positions after block k, for k < number of DeepStack features (Qwen3-VL's
// rule). Both arrive as [local_len, hidden] tensors that are zero outside
// the media rows (scatter_rows below builds them, differentiably).
//
// Usage:
//   frameshard::train::Decoder lm(cfg);
//   at::Tensor h = lm->embed(local_tokens);          // [local_len, hidden]
//   h = frameshard::train::scatter_rows(h, rows, visual);
//   at::Tensor logits = lm->forward(h, positions, deepstack, seq_len, cp);
//
// Collective: forward, over the CP group (cp_causal_attention per block).
#pragma once

#include <frameshard/runtime/process_group.h>

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace train {

struct DecoderConfig {
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t ffn = 128;
  int64_t vocab = 256;
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
};

namespace detail {
class DecoderBlockImpl;
}  // namespace detail

class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const DecoderConfig& config);

  /// Token embeddings, [tokens.size(0), hidden].
  at::Tensor embed(const at::Tensor& tokens);

  /// hidden: [local_len, hidden]; positions: int64 [local_len] global
  /// positions; deepstack[k] is added after block k. Returns the logits
  /// [local_len, vocab]. Collective over `cp_group`.
  at::Tensor forward(
      at::Tensor hidden,
      const at::Tensor& positions,
      const std::vector<at::Tensor>& deepstack,
      int64_t seq_len,
      const ProcessGroupPtr& cp_group);

  const DecoderConfig& config() const {
    return config_;
  }

 private:
  DecoderConfig config_;
  torch::nn::Embedding embed_{nullptr};
  std::vector<std::shared_ptr<detail::DecoderBlockImpl>> blocks_;
  torch::Tensor norm_weight_;
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Decoder);

/// `base` with rows `rows` (int64 [n]) replaced by `values` ([n, hidden]);
/// differentiable in both (the replaced rows of `base` get zero gradient).
at::Tensor scatter_rows(
    const at::Tensor& base, const at::Tensor& rows, const at::Tensor& values);

}  // namespace train
}  // namespace frameshard
