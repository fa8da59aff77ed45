// One arm of the training job on one rank (trainer.h).
#include <frameshard/train/trainer.h>

#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/models/cost_bridge.h>
#include <frameshard/runtime/agree.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/mesh_encode.h>
#include <frameshard/train/cp_attention.h>

#include "train/local_batch.h"
#include "train/online_step.h"
#include "train/vision_stage.h"
#include "train/vlm_parts.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace frameshard {
namespace train {

using Clock = std::chrono::steady_clock;

struct Trainer::State {
  TrainConfig config;
  TrainGroups groups;
  bool sharded = true;
  // The sharded arm with mesh_dims [dp, cp] and dp > 1: the vision of every
  // replica balanced over the whole world (encode_mesh). dp 1 is [cp].
  bool mesh = false;
  int64_t rank = 0;
  int64_t dp = 1;
  int64_t cp = 1;
  at::ScalarType dtype = at::kFloat;
  PlanOptions plan;
  models::QwenVisionModel tower;
  Decoder decoder{nullptr};
  std::vector<at::Tensor> params;  // tower's, then decoder's
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<ManifestSample> manifest;
  MemoryStats memory{c10::Device(c10::kCPU)};
  std::unique_ptr<detail::VisionStage> vision;
  // cost_alpha online on the sharded arm (online_step.h); null otherwise.
  std::unique_ptr<detail::OnlineStep> online;
  // Seconds of the decoder's forward + backward per sequence position, as
  // the last step measured: this step's prediction of the rest of the
  // step for the mesh's choice (MeshOptions::other_seconds).
  double decoder_rate = 0.0;
};

namespace {

int64_t group_size(const ProcessGroupPtr& g) {
  return g ? g->getSize() : 1;
}

// Checks the groups against the recipe (the same on every rank, so every
// rank raises the same error; agree() then catches ranks whose recipes
// differ).
void check_groups(const TrainConfig& c, const TrainGroups& g) {
  const int64_t world = group_size(g.world);
  const int64_t want = c.parallel.dp_size * c.parallel.cp_size;
  FRAMESHARD_CHECK(
      world == want,
      "train",
      "expected a world of distributed.dp_size x cp_size = ",
      c.parallel.dp_size,
      " x ",
      c.parallel.cp_size,
      " = ",
      want,
      " ranks, got ",
      world);
  FRAMESHARD_CHECK(
      g.cp && group_size(g.cp) == c.parallel.cp_size,
      "train",
      "expected a CP group of distributed.cp_size = ",
      c.parallel.cp_size,
      " ranks, got ",
      group_size(g.cp));
  FRAMESHARD_CHECK(
      c.parallel.tp_size == 1,
      "train",
      "expected distributed.tp_size 1 (the training job has no tensor "
      "parallelism), got ",
      c.parallel.tp_size);
}

// Each DeepStack output is added after its own decoder block.
void check_deepstack(
    const models::QwenVisionModel& tower, const ModelConfig& model) {
  const int64_t deepstack =
      static_cast<int64_t>(tower.config.output_names().size()) - 1;
  FRAMESHARD_CHECK(
      deepstack <= model.text_layers,
      "train",
      "expected model.text_layers >= the tower's DeepStack outputs (",
      deepstack,
      "), got ",
      model.text_layers);
}

uint64_t config_fingerprint(const TrainConfig& c, bool sharded) {
  return std::hash<std::string>{}(to_yaml(c) + (sharded ? "|s" : "|r"));
}

// Rank 0's parameters on every rank (as DDP does at construction): the
// seeded initialisation already agrees, this makes it independent of how
// each machine's torch draws. One collective over a flat buffer.
void broadcast_parameters(
    const std::vector<std::pair<std::string, at::Tensor>>& params,
    const ProcessGroupPtr& world) {
  if (!world || world->getSize() == 1 || params.empty()) {
    return;
  }
  std::vector<at::Tensor> flat_parts;
  for (const auto& p : params) {
    flat_parts.push_back(p.second.detach().reshape(-1));
  }
  std::vector<at::Tensor> flat{at::cat(flat_parts)};
  world->broadcast(flat)->wait();
  torch::NoGradGuard no_grad;
  int64_t off = 0;
  for (const auto& p : params) {
    const int64_t n = p.second.numel();
    p.second.copy_(flat[0].narrow(0, off, n).view(p.second.sizes()));
    off += n;
  }
}

}  // namespace

Trainer::Trainer(
    const TrainConfig& config, const TrainGroups& groups, bool sharded)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = config;
  s.groups = groups;
  s.sharded = sharded;
  s.rank = groups.world ? groups.world->getRank() : 0;
  s.dp = config.parallel.dp_size;
  s.cp = config.parallel.cp_size;
  s.mesh = sharded && s.dp > 1 &&
           config.parallel.frame_sharding.mesh_dims ==
               std::vector<std::string>{"dp", "cp"};
  s.memory = MemoryStats(groups.device);
  std::exception_ptr error;
  try {
    check_groups(config, groups);
    s.dtype = detail::parse_train_dtype(config.train.dtype);
    {
      // torch's default generator is process-wide: ranks that are threads
      // of one process (the tests) must not interleave their draws.
      static std::mutex init_mutex;
      std::lock_guard<std::mutex> lock(init_mutex);
      torch::manual_seed(static_cast<uint64_t>(config.train.seed));
      s.tower = detail::make_tower(config.model, s.dtype);
      s.decoder = Decoder(detail::decoder_config(
          config.model, s.tower.config.out_hidden_size()));
    }
    check_deepstack(s.tower, config.model);
    s.decoder->to(s.dtype);
    s.tower.module->to(groups.device);
    s.decoder->to(groups.device);
    // cost_alpha auto counts the FLOPs of the tower that runs, not a preset.
    s.plan =
        arm_plan_options(config, sharded, models::tower_dims(s.tower.config));
    s.plan.layout = models::media_layout(s.tower.config);
    {
      // The auto policy's and the mesh choice's output row: this tower's
      // (every merger's output travels fused), not a 4096-wide default.
      const TowerDims d = models::tower_dims(s.tower.config);
      s.plan.policy.gather_row_bytes =
          d.out_hidden * std::max<int64_t>(1, d.mergers) *
          static_cast<int64_t>(c10::elementSize(s.dtype));
    }
    FRAMESHARD_CHECK(
        !s.plan.split.enabled || models::takes_pieces(s.tower.config),
        "train",
        "expected distributed.multimodal.vision.frame_sharding.split_frames "
        "false for model.tower ",
        config.model.tower,
        " (its tower does not take pieces of split frames), got true");
    if (!config.data.manifest.empty()) {
      s.manifest = load_manifest(config.data.manifest, s.plan.layout);
    }
    // The replicated arm's plan never weighs costs (sharding off): the
    // baseline stays without the online model and its all-gather.
    if (sharded && config.parallel.frame_sharding.cost_alpha == kOnlineCost) {
      s.online = std::make_unique<detail::OnlineStep>(s.plan);
    }
    s.params = s.tower.module->parameters();
    for (const auto& p : s.decoder->parameters()) {
      s.params.push_back(p);
    }
    s.optimizer = std::make_unique<torch::optim::AdamW>(
        s.params,
        torch::optim::AdamWOptions(config.train.lr)
            .weight_decay(config.train.weight_decay));
    // Dedup belongs to the sharded arm (with sharding off it is AReaL's
    // rank-local dedup); the replicated arm is the baseline without it.
    s.vision = std::make_unique<detail::VisionStage>(
        s.tower.tower,
        config.model.vision_checkpointing,
        &s.memory,
        sharded && config.parallel.frame_sharding.dedup,
        s.plan.layout);
  } catch (...) {
    error = std::current_exception();
  }
  agree(
      groups.world,
      config_fingerprint(config, sharded),
      error,
      "train",
      "config",
      groups.device);
  broadcast_parameters(named_parameters(), groups.world);
}

Trainer::~Trainer() = default;

int64_t Trainer::dp_rank() const {
  return state_->rank / state_->cp;
}

int64_t Trainer::cp_rank() const {
  return state_->rank % state_->cp;
}

const PlanOptions& Trainer::plan_options() const {
  return state_->plan;
}

const ShardPlan& Trainer::vision_plan() const {
  return state_->vision->plan();
}

const OnlineCost* Trainer::online_cost() const {
  return state_->online ? &state_->online->cost() : nullptr;
}

BatchLayout Trainer::batch(int64_t step) const {
  const State& s = *state_;
  BatchRequest r;
  r.vocab_size = s.config.model.vocab_size;
  r.pad_multiple = 2 * s.cp;
  r.step = step;
  r.dp_rank = dp_rank();
  r.dp_size = s.dp;
  if (!s.manifest.empty()) {
    return manifest_batch(s.manifest, s.config.data, s.plan.layout, r);
  }
  return synthetic_batch(s.config.data, s.plan.layout, r);
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::named_parameters()
    const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : state_->tower.module->named_parameters()) {
    out.emplace_back("tower." + p.key(), p.value());
  }
  for (const auto& p : state_->decoder->named_parameters()) {
    out.emplace_back("decoder." + p.key(), p.value());
  }
  return out;
}

namespace {

// The decoder's input and DeepStack additions from the visual outputs.
at::Tensor decoder_loss(
    Decoder& lm,
    const detail::LocalBatch& b,
    const std::vector<at::Tensor>& visual,
    const ProcessGroupPtr& cp) {
  at::Tensor h = lm->embed(b.tokens);
  h = scatter_rows(h, b.media_rows, visual[0].index_select(0, b.media_src));
  std::vector<at::Tensor> deepstack;
  for (size_t k = 1; k < visual.size(); ++k) {
    deepstack.push_back(scatter_rows(
        at::zeros_like(h),
        b.media_rows,
        visual[k].index_select(0, b.media_src)));
  }
  at::Tensor logits =
      lm->forward(h, b.positions, deepstack, b.layout.seq_len(), cp);
  at::Tensor loss = at::cross_entropy_loss(
      logits.to(logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
      b.labels,
      {},
      at::Reduction::Sum,
      kIgnoreLabel);
  return loss / static_cast<double>(std::max<int64_t>(1, b.label_count));
}

// Sum of every parameter gradient over the world, divided by dp (one
// collective over a flat buffer).
void all_reduce_gradients(
    const std::vector<at::Tensor>& params,
    const ProcessGroupPtr& world,
    int64_t dp) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    grads.push_back(
        p.grad().defined() ? p.grad().reshape(-1)
                           : at::zeros({p.numel()}, p.options()));
  }
  at::Tensor flat = at::cat(grads);
  if (world && world->getSize() > 1) {
    std::vector<at::Tensor> v{flat};
    world->allreduce(v)->wait();
  }
  if (dp > 1) {
    flat.div_(static_cast<double>(dp));
  }
  int64_t off = 0;
  for (const auto& p : params) {
    at::Tensor g = flat.narrow(0, off, p.numel()).view(p.sizes());
    if (p.grad().defined()) {
      p.mutable_grad().copy_(g);
    } else {
      p.mutable_grad() = g.clone();
    }
    off += p.numel();
  }
}

double global_loss(
    const at::Tensor& local, const ProcessGroupPtr& world, int64_t dp) {
  at::Tensor l = local.detach().to(at::kDouble).reshape({1}).cpu().clone();
  if (world && world->getSize() > 1) {
    std::vector<at::Tensor> v{l};
    world->allreduce(v)->wait();
  }
  return l.item<double>() / static_cast<double>(dp);
}

// [0, width] outputs of every tower output: what a rank without visual
// rows hands the decoder (it scatters nothing).
std::vector<at::Tensor> no_visual_rows(
    const models::QwenVisionModel& tower,
    at::ScalarType dtype,
    c10::Device device) {
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < tower.config.output_names().size(); ++k) {
    out.push_back(at::zeros(
        {0, tower.config.out_hidden_size()},
        at::TensorOptions().dtype(dtype).device(device)));
  }
  return out;
}

// The step's vision. mesh_dp > 0: encode_mesh over the world with the CP
// path's plan options (the world becomes dp * cp) and this replica's owner
// map; every rank joins, a text-only replica too (it encodes other
// replicas' frames). Else encode over the CP group; a text-only batch is
// the same on every rank of the group, so they all skip it alike. Empty:
// no visual rows for this rank.
std::vector<at::Tensor> encode_step(
    detail::VisionStage& vision,
    const detail::LocalBatch& b,
    const TrainGroups& g,
    int64_t mesh_dp,
    int64_t cp,
    double min_gain,
    double other_seconds,
    double exchange_latency_seconds,
    const EncodeOptions& eo) {
  if (mesh_dp > 0) {
    EncodeOptions mo = eo;
    mo.mesh.dp = mesh_dp;
    mo.mesh.cp = cp;
    mo.mesh.min_gain = min_gain;
    mo.mesh.other_seconds = other_seconds;
    mo.mesh.exchange_latency_seconds = exchange_latency_seconds;
    // A CP-only step then runs as mesh_dims [cp] would, on the CP group.
    mo.mesh.cp_group = g.cp;
    return vision.forward_mesh(b.pixels, b.grid, g.world, mo, g.cp);
  }
  if (b.layout.grid.empty()) {
    vision.skip();
    return {};
  }
  return vision.forward(b.pixels, b.grid, g.cp, eo);
}

}  // namespace

StepMetrics Trainer::forward_backward(int64_t step) {
  State& s = *state_;
  const auto device = s.groups.device;
  const auto start = Clock::now();
  s.memory.reset_peak();
  const int64_t features = s.tower.config.in_features();
  detail::LocalBatch b =
      detail::local_batch(*this, s.config, step, s.dtype, device, features);
  for (auto& p : s.params) {
    p.mutable_grad() = at::Tensor();
  }

  StepMetrics m;
  EncodeOptions eo;
  eo.plan = s.online ? s.online->plan_options(s.plan) : s.plan;
  m.cost_model =
      s.online ? s.online->cost().in_force().describe() : s.plan.cost.label;
  eo.timeout = std::chrono::milliseconds(s.config.train.timeout_ms);
  if (models::takes_pieces(s.tower.config)) {
    // One K/V exchange per full-attention layer: one consensus a call.
    eo.tower_exchanges = models::tower_dims(s.tower.config).full_layers();
  }
  if (s.config.parallel.frame_sharding.gather == "owner") {
    detail::route_to_owners(b, s.cp, eo);
  }
  std::vector<at::Tensor> visual = encode_step(
      *s.vision,
      b,
      s.groups,
      s.mesh ? s.dp : 0,
      s.cp,
      s.config.parallel.frame_sharding.mesh_min_gain,
      s.decoder_rate * static_cast<double>(b.layout.seq_len()),
      s.config.parallel.frame_sharding.split_exchange_latency_us * 1e-6,
      eo);
  if (visual.empty()) {
    visual = no_visual_rows(s.tower, s.dtype, device);
  }
  FRAMESHARD_CHECK(
      eo.token_owner.empty() || visual[0].size(0) == b.media_rows.size(0),
      "train",
      "expected the owner-routed visual rows to match this rank's ",
      b.media_rows.size(0),
      " media positions, got ",
      visual[0].size(0));
  const int64_t vision_peak = s.vision->tower_peak_bytes();

  const auto lm_start = Clock::now();
  at::Tensor loss = decoder_loss(s.decoder, b, visual, s.groups.cp);
  loss.backward();
  m.decoder_seconds = detail::elapsed_seconds(lm_start, device);
  s.decoder_rate = m.decoder_seconds / static_cast<double>(std::max<int64_t>(
                                           1, b.layout.seq_len()));
  s.vision->backward_gather();
  s.vision->backward_tower();
  detail::read_vision_metrics(*s.vision, m);
  if (s.online) {
    // Thread CPU time on a CPU (ranks sharing cores do not inflate it);
    // on CUDA the thread only launches, and the wall time is synced.
    s.online->finish_step(
        *s.vision,
        device.is_cuda() ? m.vision_seconds : m.vision_cpu_seconds,
        s.groups.world,
        s.mesh,
        m);
  }

  all_reduce_gradients(s.params, s.groups.world, s.dp);
  m.step = step;
  m.loss = global_loss(loss, s.groups.world, s.dp);
  m.vision_peak_bytes = vision_peak;
  m.step_seconds = detail::elapsed_seconds(start, device);
  m.peak_bytes = std::max(s.vision->peak_before_tower(), s.memory.peak_bytes());
  return m;
}

StepMetrics Trainer::step(int64_t step) {
  const auto start = Clock::now();
  StepMetrics m = forward_backward(step);
  state_->optimizer->step();
  m.step_seconds = detail::elapsed_seconds(start, state_->groups.device);
  m.peak_bytes = std::max(m.peak_bytes, state_->memory.peak_bytes());
  return m;
}

}  // namespace train
}  // namespace frameshard
