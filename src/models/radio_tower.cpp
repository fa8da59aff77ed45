// Nemotron Omni's vision chain (see frameshard/models/radio_tower.h): RADIO's
// patch generator and blocks from the shared Qwen builders (fused qkv, no
// rotary, layer scale), then the pixel shuffle and the projector.
#include <frameshard/models/radio_tower.h>

#include "models/qwen_blocks.h"
#include "tower/check.h"

#include <map>
#include <numeric>
#include <utility>

namespace frameshard {
namespace models {

namespace {

constexpr const char* kRadioTower = "RadioVisionTower";

detail::TowerSpec spec_of(const RadioVisionConfig& c) {
  detail::TowerSpec s;
  s.name = kRadioTower;
  s.depth = c.depth;
  s.dim = c.hidden_size;
  s.heads = c.num_heads;
  s.mlp_hidden = c.intermediate_size();
  s.out = c.out_hidden_size;
  s.in_channels = c.in_channels;
  s.patch_size = c.patch_size;
  s.temporal_patch_size = c.temporal_patch_size;
  s.merge = c.spatial_merge_size;
  s.hidden_act = c.hidden_act;
  s.norm = detail::NormKind::kLayerNorm;
  s.mlp = detail::MlpStyle::kFc;
  s.norm_eps = c.layer_norm_eps;
  s.layer_scale = true;
  return s;
}

// What the shared spec check does not size: the position table and the
// projector (4d -> projector_hidden -> out).
void check_radio_sizes(const RadioVisionConfig& c) {
  const double d = static_cast<double>(c.hidden_size);
  const double side = static_cast<double>(c.grid_per_side());
  const double h = static_cast<double>(c.projector_hidden_size);
  const double params =
      side * side * d + 4 * d * h + h * static_cast<double>(c.out_hidden_size);
  FRAMESHARD_TORCH_CHECK(
      c.grid_per_side() >= 1 && params <= double(kMaxTowerParameters),
      kRadioTower,
      "expected max_img_size >= patch_size and a position table plus "
      "projector of at most ",
      kMaxTowerParameters,
      " parameters, got max_img_size ",
      c.max_img_size,
      ", patch_size ",
      c.patch_size,
      " and about ",
      params);
}

// An empty module registered as `name` of `owner` (HF's nesting).
std::shared_ptr<torch::nn::Module> radio_child(
    torch::nn::Module& owner, const std::string& name) {
  return owner.register_module(name, std::make_shared<torch::nn::Module>());
}

}  // namespace

RadioVisionTowerImpl::RadioVisionTowerImpl(const RadioVisionConfig& c)
    : config_(c) {
  const detail::TowerSpec s = spec_of(c);
  detail::check_tower_spec(s, /*rotary=*/false);
  check_radio_sizes(c);
  auto model = radio_child(
      *radio_child(*radio_child(*this, "vision_model"), "radio_model"),
      "model");
  auto patches = radio_child(*model, "patch_generator");
  const int64_t d = c.hidden_size;
  const double bound = 1.0 / std::sqrt(static_cast<double>(c.in_features()));
  embedder_ = radio_child(*patches, "embedder")
                  ->register_parameter(
                      "weight",
                      at::empty({d, c.in_features()}).uniform_(-bound, bound));
  const int64_t side = c.grid_per_side();
  pos_embed_ = patches->register_parameter(
      "pos_embed", at::randn({1, side * side, d}) * 0.02);
  prefix_ = radio_child(*patches, "cls_token")
                ->register_parameter(
                    "token", at::randn({c.prefix_tokens(), d}) * 0.02);
  blocks_ = detail::register_blocks(*model, s);
  if (c.final_layernorm) {
    final_norm_ =
        radio_child(*this, "vision_projector")
            ->register_module(
                "vision_final_layernorm",
                detail::Norm(d, detail::NormKind::kLayerNorm, c.layer_norm_eps)
                    .ptr());
  }
  auto mlp1 = radio_child(*this, "mlp1");
  const int64_t shuffled = 4 * d;  // the 2 x 2 pixel shuffle
  projector_norm_ = mlp1->register_module(
      "0",
      detail::Norm(shuffled, detail::NormKind::kRMSNormScaleInFloat, 1e-5)
          .ptr());
  auto no_bias = [](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  projector1_ =
      mlp1->register_module("1", no_bias(shuffled, c.projector_hidden_size));
  projector2_ = mlp1->register_module(
      "3", no_bias(c.projector_hidden_size, c.out_hidden_size));
}

at::Tensor RadioVisionTowerImpl::frame_positions(
    int64_t h, int64_t w, at::ScalarType dtype) const {
  const int64_t side = config_.grid_per_side();
  const int64_t d = config_.hidden_size;
  const int64_t longer = std::max(h, w);
  // RADIO's CPE: resample to the longer side's square, crop to (h, w).
  at::Tensor table = pos_embed_.reshape({1, side, side, d})
                         .permute({0, 3, 1, 2})
                         .to(detail::accum_dtype(dtype));
  table = at::upsample_bilinear2d(
      table,
      {longer, longer},
      /*align_corners=*/false,
      c10::nullopt,
      c10::nullopt);
  table = table.narrow(2, 0, h).narrow(3, 0, w).to(dtype);
  return table.flatten(2).permute({0, 2, 1}).reshape({h * w, d});
}

std::vector<at::Tensor> RadioVisionTowerImpl::forward(const TowerInput& input) {
  const RadioVisionConfig& c = config_;
  const auto geo = detail::check_tower_input(
      input, c.in_features(), c.spatial_merge_size, kRadioTower);
  FRAMESHARD_TORCH_CHECK(
      geo.pieces.empty(),
      kRadioTower,
      "expected whole frames (RADIO does not take pieces of split frames: "
      "set frame_sharding.split_frames false), got ",
      geo.pieces.size(),
      " pieces");
  const at::Tensor x =
      at::linear(input.pixel_values.to(embedder_.scalar_type()), embedder_);
  const int64_t prefix = c.prefix_tokens();
  std::map<std::pair<int64_t, int64_t>, at::Tensor> positions;
  std::vector<at::Tensor> sequence;
  std::vector<int64_t> cu{0};
  std::vector<std::pair<int64_t, int64_t>> frames;  // (h, w) per frame
  // Every frame's rows from one split (its backward is one cat; a narrow per
  // frame would make the backward O(frames x rows)).
  std::vector<int64_t> sizes;
  for (const GridThw& g : geo.grid) {
    sizes.insert(sizes.end(), static_cast<size_t>(g.t), g.h * g.w);
  }
  sizes.push_back(
      x.size(0) -
      std::accumulate(sizes.begin(), sizes.end(), int64_t{0}));  // 0 rows
  const std::vector<at::Tensor> frame_rows = x.split_with_sizes(sizes, 0);
  for (const GridThw& g : geo.grid) {
    auto& pos = positions[{g.h, g.w}];
    if (!pos.defined()) {
      pos = frame_positions(g.h, g.w, x.scalar_type());
    }
    for (int64_t t = 0; t < g.t; ++t) {
      const size_t f = frames.size();
      sequence.push_back(prefix_.to(x.scalar_type()));
      sequence.push_back(frame_rows[f] + pos);
      cu.push_back(cu.back() + prefix + g.h * g.w);
      frames.emplace_back(g.h, g.w);
    }
  }
  // No frames (never planned, but a valid input): empty outputs, still
  // connected to the parameters.
  at::Tensor hidden = sequence.empty() ? x : at::cat(sequence, 0);
  for (const auto& block : blocks_) {
    hidden = block->forward(hidden, detail::Rotary{}, cu);
  }
  // Drop the prefix; shuffle each frame's (h, w) grid into 2 x 2 blocks.
  const int64_t d = c.hidden_size;
  std::vector<int64_t> parts;  // prefix, then patches, per frame (one split)
  for (const auto& [h, w] : frames) {
    parts.push_back(prefix);
    parts.push_back(h * w);
  }
  parts.push_back(hidden.size(0) - cu.back());
  const std::vector<at::Tensor> split = hidden.split_with_sizes(parts, 0);
  std::vector<at::Tensor> shuffled;
  for (size_t f = 0; f < frames.size(); ++f) {
    const auto [h, w] = frames[f];
    at::Tensor feats = split[2 * f + 1];
    if (final_norm_) {
      feats = final_norm_->forward(feats);
    }
    shuffled.push_back(feats.reshape({h / 2, 2, w / 2, 2, d})
                           .permute({0, 2, 1, 3, 4})
                           .reshape({h * w / 4, 4 * d}));
  }
  at::Tensor y = projector_norm_->forward(
      shuffled.empty() ? hidden.reshape({0, 4 * d}) : at::cat(shuffled, 0));
  y = at::relu(projector1_(y)).square();
  return {projector2_(y)};
}

VisionTower as_vision_tower(RadioVisionTower tower) {
  return detail::tower_function(tower.ptr());
}

std::vector<std::string> radio_unused_tensors() {
  return {
      "vision_model.radio_model.summary_idxs",
      "vision_model.radio_model.model.patch_generator.video_embedder.weight",
  };
}

}  // namespace models
}  // namespace frameshard
