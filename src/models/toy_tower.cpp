// The toy Qwen-style tower (see frameshard/models/toy_tower.h).
#include <frameshard/models/toy_tower.h>

#include "tower/check.h"

#include <cmath>
#include <string>
#include <utility>

namespace frameshard {
namespace models {

namespace {

// Rows of one grid row's frame, in the processor's merge-window order: for
// each block-row br and block-col bc, the m*m patches of that window row by
// row. Returns the (y, x) patch coordinates of every row of ONE frame.
std::pair<at::Tensor, at::Tensor> frame_coords(
    int64_t h, int64_t w, int64_t m) {
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor y = at::arange(h, opts).view({h, 1}).expand({h, w});
  at::Tensor x = at::arange(w, opts).view({1, w}).expand({h, w});
  auto window_order = [&](const at::Tensor& c) {
    return c.reshape({h / m, m, w / m, m}).permute({0, 2, 1, 3}).flatten();
  };
  return {window_order(y), window_order(x)};
}

// Fixed sinusoidal embedding of one coordinate into `dim` features
// (dim / 2 frequencies, sin then cos), like a Transformer's absolute
// positions. No parameters: the signal is the same on every rank.
at::Tensor sinusoid(const at::Tensor& coord, int64_t dim) {
  const int64_t half = dim / 2;
  at::Tensor k = at::arange(half, coord.options());
  at::Tensor freq = at::exp(k * (-2.0 * std::log(10000.0) / double(dim)));
  at::Tensor angle = coord.unsqueeze(1) * freq.unsqueeze(0);
  return at::cat({at::sin(angle), at::cos(angle)}, 1);
}

// The header hands blocks and mergers in as const references; a module's
// forward is not const-qualified, so call through the shared impl.
template <typename Holder>
at::Tensor run_module(const Holder& module, const at::Tensor& x) {
  return module.ptr()->forward(x);
}

}  // namespace

ToyTowerImpl::ToyTowerImpl(const ToyTowerOptions& options) : options_(options) {
  const auto& o = options_;
  FRAMESHARD_TORCH_CHECK(
      o.channels > 0 && o.patch_size > 0 && o.temporal_patch_size > 0 &&
          o.spatial_merge_size > 0 && o.out_hidden > 0,
      "ToyTower",
      "expected positive channels, patch_size, temporal_patch_size, "
      "spatial_merge_size and out_hidden, got ",
      o.channels,
      ", ",
      o.patch_size,
      ", ",
      o.temporal_patch_size,
      ", ",
      o.spatial_merge_size,
      ", ",
      o.out_hidden);
  FRAMESHARD_TORCH_CHECK(
      o.hidden > 0 && o.hidden % 4 == 0,
      "ToyTower",
      "expected hidden a positive multiple of 4 (2-D sinusoidal positions), "
      "got ",
      o.hidden);
  FRAMESHARD_TORCH_CHECK(
      o.heads > 0 && o.hidden % o.heads == 0,
      "ToyTower",
      "expected heads dividing hidden ",
      o.hidden,
      ", got ",
      o.heads);
  FRAMESHARD_TORCH_CHECK(
      o.depth >= 1, "ToyTower", "expected depth >= 1, got ", o.depth);
  FRAMESHARD_TORCH_CHECK(
      !o.deepstack || (o.deepstack_layer >= 0 && o.deepstack_layer < o.depth),
      "ToyTower",
      "expected deepstack_layer in [0, ",
      o.depth,
      "), got ",
      o.deepstack_layer);

  // Names use '_' because registered module names may not contain '.'.
  embed_ =
      register_module("embed", torch::nn::Linear(o.in_features(), o.hidden));
  const int64_t mlp = 4 * o.hidden;
  for (int64_t i = 0; i < o.depth; ++i) {
    const std::string p = "block" + std::to_string(i) + "_";
    Block b;
    b.norm1 = register_module(
        p + "norm1",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden})));
    b.qkv =
        register_module(p + "qkv", torch::nn::Linear(o.hidden, 3 * o.hidden));
    b.proj = register_module(p + "proj", torch::nn::Linear(o.hidden, o.hidden));
    b.norm2 = register_module(
        p + "norm2",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden})));
    b.fc1 = register_module(p + "fc1", torch::nn::Linear(o.hidden, mlp));
    b.fc2 = register_module(p + "fc2", torch::nn::Linear(mlp, o.hidden));
    blocks_.push_back(b);
  }
  const int64_t window = o.spatial_merge_size * o.spatial_merge_size;
  auto make_merger = [&](const std::string& p) {
    Merger m;
    m.norm = register_module(
        p + "norm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden})));
    m.fc1 = register_module(
        p + "fc1", torch::nn::Linear(window * o.hidden, window * o.hidden));
    m.fc2 = register_module(
        p + "fc2", torch::nn::Linear(window * o.hidden, o.out_hidden));
    return m;
  };
  merger_ = make_merger("merger_");
  if (o.deepstack) {
    deepstack_merger_ = make_merger("deepstack_merger_");
  }
}

at::Tensor ToyTowerImpl::block_forward(
    const Block& b, const at::Tensor& x, const at::Tensor& cu_seqlens) {
  const int64_t hidden = options_.hidden;
  const int64_t heads = options_.heads;
  const int64_t hd = hidden / heads;
  const double scale = 1.0 / std::sqrt(double(hd));

  at::Tensor qkv =
      run_module(b.qkv, run_module(b.norm1, x));  // [rows, 3 * hidden]
  const auto* cu = cu_seqlens.data_ptr<int32_t>();
  const int64_t frames = cu_seqlens.size(0) - 1;
  std::vector<at::Tensor> pieces;
  // Attention never crosses a frame boundary. Consecutive frames of equal
  // length run as one batched matmul (each batch entry is computed on its
  // own, so a frame's result does not depend on its neighbours).
  int64_t f = 0;
  while (f < frames) {
    const int64_t n = cu[f + 1] - cu[f];
    int64_t g = f + 1;
    while (g < frames && cu[g + 1] - cu[g] == n) {
      ++g;
    }
    const int64_t batch = g - f;
    if (n > 0) {
      at::Tensor t = qkv.narrow(0, cu[f], batch * n)
                         .view({batch, n, 3, heads, hd})
                         .permute({2, 0, 3, 1, 4});  // [3, B, heads, n, hd]
      at::Tensor q = t[0], k = t[1], v = t[2];
      at::Tensor attn =
          at::softmax(at::matmul(q, k.transpose(-2, -1)) * scale, -1);
      at::Tensor o = at::matmul(attn, v);  // [B, heads, n, hd]
      pieces.push_back(o.permute({0, 2, 1, 3}).reshape({batch * n, hidden}));
    }
    f = g;
  }
  at::Tensor attended = pieces.empty() ? at::zeros_like(x) : at::cat(pieces, 0);
  at::Tensor h = x + run_module(b.proj, attended);
  return h + run_module(
                 b.fc2, torch::gelu(run_module(b.fc1, run_module(b.norm2, h))));
}

at::Tensor ToyTowerImpl::merge(const Merger& m, const at::Tensor& x) {
  const int64_t window =
      options_.spatial_merge_size * options_.spatial_merge_size;
  at::Tensor y = run_module(m.norm, x).reshape(
      {x.size(0) / window, window * options_.hidden});
  return run_module(m.fc2, torch::gelu(run_module(m.fc1, y)));
}

namespace {

/// What forward needs from its input, validated: the int32 cu_seqlens on
/// the CPU and every row's (y, x) position in its frame.
struct CheckedInput {
  at::Tensor cu;
  at::Tensor ys, xs;
  int64_t rows = 0;
};

void check_shapes(const ToyTowerOptions& o, const TowerInput& input) {
  const at::Tensor& pixels = input.pixel_values;
  FRAMESHARD_TORCH_CHECK(
      pixels.dim() == 2 && pixels.size(1) == o.in_features(),
      "ToyTower::forward",
      "expected pixel_values [rows, ",
      o.in_features(),
      "], got ",
      pixels.sizes());
  FRAMESHARD_TORCH_CHECK(
      input.grid_thw.dim() == 2 && input.grid_thw.size(1) == 3,
      "ToyTower::forward",
      "expected grid_thw [n, 3], got ",
      input.grid_thw.sizes());
  FRAMESHARD_TORCH_CHECK(
      input.cu_seqlens.dim() == 1 && input.cu_seqlens.size(0) >= 1,
      "ToyTower::forward",
      "expected cu_seqlens [frames + 1], got ",
      input.cu_seqlens.sizes());
}

CheckedInput check_input(const ToyTowerOptions& o, const TowerInput& input) {
  check_shapes(o, input);
  const int64_t m = o.spatial_merge_size;
  const at::Tensor& pixels = input.pixel_values;
  at::Tensor grid = input.grid_thw.to(at::kCPU, at::kLong).contiguous();
  at::Tensor cu = input.cu_seqlens.to(at::kCPU, at::kInt).contiguous();

  // Position signal and the frame segments both follow grid_thw; check that
  // cu_seqlens describes the same frames so a caller's mismatch is an error,
  // not silently wrong attention.
  const auto* g = grid.data_ptr<int64_t>();
  const auto* c = cu.data_ptr<int32_t>();
  const int64_t frames = cu.size(0) - 1;
  FRAMESHARD_TORCH_CHECK(
      c[0] == 0,
      "ToyTower::forward",
      "expected cu_seqlens[0] == 0, got ",
      c[0]);
  std::vector<at::Tensor> ys, xs;
  int64_t frame = 0;
  int64_t rows = 0;
  for (int64_t i = 0; i < grid.size(0); ++i) {
    const int64_t t = g[3 * i], h = g[3 * i + 1], w = g[3 * i + 2];
    FRAMESHARD_TORCH_CHECK(
        t > 0 && h > 0 && w > 0 && h % m == 0 && w % m == 0,
        "ToyTower::forward",
        "expected grid_thw[",
        i,
        "] positive with h, w divisible by spatial_merge_size ",
        m,
        ", got (",
        t,
        ", ",
        h,
        ", ",
        w,
        ")");
    for (int64_t k = 0; k < t; ++k, ++frame) {
      FRAMESHARD_TORCH_CHECK(
          frame < frames && c[frame + 1] - c[frame] == h * w,
          "ToyTower::forward",
          "expected cu_seqlens segment ",
          frame,
          " of ",
          h * w,
          " rows (grid_thw[",
          i,
          "]), got ",
          frame < frames ? std::to_string(c[frame + 1] - c[frame])
                         : std::string("no segment"));
    }
    auto yx = frame_coords(h, w, m);
    ys.push_back(yx.first.repeat({t}));
    xs.push_back(yx.second.repeat({t}));
    rows += t * h * w;
  }
  FRAMESHARD_TORCH_CHECK(
      frame == frames,
      "ToyTower::forward",
      "expected ",
      frame,
      " cu_seqlens segments (grid_thw frames), got ",
      frames);
  FRAMESHARD_TORCH_CHECK(
      rows == pixels.size(0) && c[frames] == rows,
      "ToyTower::forward",
      "expected ",
      rows,
      " pixel rows (sum t*h*w), got ",
      pixels.size(0),
      " (cu_seqlens total ",
      c[frames],
      ")");

  CheckedInput in;
  in.cu = cu;
  in.rows = rows;
  if (rows > 0) {
    in.ys = at::cat(ys);
    in.xs = at::cat(xs);
  }
  return in;
}

}  // namespace

std::vector<at::Tensor> ToyTowerImpl::forward(const TowerInput& input) {
  const auto& o = options_;
  // The toy attention has no whole-frame keys for a piece: refuse rather
  // than attend within the piece (wrong values, and no exchange call).
  FRAMESHARD_TORCH_CHECK(
      input.pieces.empty() && !input.exchange,
      "ToyTower",
      "expected whole frames (split_frames off), got ",
      input.pieces.size(),
      " pieces of split frames: split frames need a Qwen tower");
  const CheckedInput in = check_input(o, input);
  const at::Tensor& pixels = input.pixel_values;
  at::Tensor x = embed_(pixels);
  if (in.rows > 0) {
    const int64_t half = o.hidden / 2;
    at::Tensor pos = at::cat({sinusoid(in.ys, half), sinusoid(in.xs, half)}, 1);
    x = x + pos.to(x.options());
  }
  at::Tensor deep;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    x = block_forward(blocks_[i], x, in.cu);
    if (o.deepstack && int64_t(i) == o.deepstack_layer) {
      deep = x;
    }
  }
  std::vector<at::Tensor> out{merge(merger_, x)};
  if (o.deepstack) {
    out.push_back(merge(deepstack_merger_, deep));
  }
  return out;
}

VisionTower as_vision_tower(ToyTower tower) {
  // Capture the shared impl: ModuleHolder::operator-> is const-qualified
  // and forward() is not.
  std::shared_ptr<ToyTowerImpl> impl = tower.ptr();
  return [impl](const TowerInput& input) { return impl->forward(input); };
}

}  // namespace models
}  // namespace frameshard
