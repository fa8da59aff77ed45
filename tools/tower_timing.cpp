#include "tower_timing.h"

#include "dtype_option.h"

#include <frameshard/error.h>
#include <frameshard/runtime/encode.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <stdexcept>

namespace frameshard {
namespace cli {

std::vector<std::string> timing_tower_families() {
  return {"qwen2-vl", "qwen2.5-vl", "qwen3-vl"};
}

models::QwenVisionConfig small_tower_config(
    const std::string& family, int64_t width, int64_t depth) {
  const int64_t heads = std::max<int64_t>(1, width / 64);
  if (family == "qwen2-vl") {
    models::Qwen2VLVisionConfig c;
    c.depth = depth;
    c.embed_dim = width;
    c.hidden_size = width;
    c.num_heads = heads;
    return c;
  }
  if (family == "qwen2.5-vl") {
    models::Qwen2_5VLVisionConfig c;
    c.depth = depth;
    c.hidden_size = width;
    c.intermediate_size = 8 * width / 3;
    c.num_heads = heads;
    c.out_hidden_size = width;
    c.fullatt_block_indexes = {depth - 1};
    return c;
  }
  if (family == "qwen3-vl") {
    models::Qwen3VLVisionConfig c;
    c.depth = depth;
    c.hidden_size = width;
    c.intermediate_size = 4 * width;
    c.num_heads = heads;
    c.out_hidden_size = width;
    c.deepstack_visual_indexes = {0};
    return c;
  }
  throw std::invalid_argument(
      "frameshard::small_tower_config: expected family qwen2-vl, qwen2.5-vl "
      "or qwen3-vl, got \"" +
      family + "\"");
}

models::QwenVisionConfig released_tower_config(
    const std::string& family, int64_t depth) {
  if (family == "qwen2-vl") {
    models::Qwen2VLVisionConfig c;
    c.depth = depth;
    return c;
  }
  if (family == "qwen2.5-vl") {
    models::Qwen2_5VLVisionConfig c;
    c.depth = depth;
    c.hidden_size = 1280;  // the released checkpoints' width
    c.fullatt_block_indexes = {depth - 1};
    return c;
  }
  if (family == "qwen3-vl") {
    models::Qwen3VLVisionConfig c;
    c.depth = depth;
    c.deepstack_visual_indexes = {0};
    return c;
  }
  return small_tower_config(family, 256, depth);  // its error names family
}

models::QwenVisionModel make_timing_tower(const TowerSpec& spec) {
  FRAMESHARD_CHECK(
      spec.device == "cpu" ||
          (spec.device == "cuda" && torch::cuda::is_available()),
      "timing_tower",
      "expected --device cpu, or cuda on a machine where this torch sees a "
      "GPU, got \"",
      spec.device,
      "\" (CUDA GPUs visible: ",
      static_cast<int>(torch::cuda::device_count()),
      ")");
  models::QwenVisionModel m =
      spec.model_dir.empty()
          ? models::make_qwen_vision(
                spec.width == 0
                    ? released_tower_config(spec.family, spec.depth)
                    : small_tower_config(spec.family, spec.width, spec.depth))
          : models::load_qwen_vision(spec.model_dir);
  m.module->to(c10::Device(spec.device), spec.dtype);
  return m;
}

namespace {

at::Tensor first_parameter(const models::QwenVisionModel& m) {
  const std::vector<at::Tensor> params = m.module->parameters();
  FRAMESHARD_CHECK(
      !params.empty(),
      "timing_tower",
      "expected a tower with parameters, got none");
  return params.front();
}

}  // namespace

std::string timing_dtype_name(const models::QwenVisionModel& m) {
  return dtype_option_name(first_parameter(m).scalar_type());
}

std::string timing_device_name(const models::QwenVisionModel& m) {
  return first_parameter(m).is_cuda() ? "cuda" : "cpu";
}

namespace {

double now(bool cpu_clock) {
  if (cpu_clock) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) +
           1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits for the device's queued kernels, so that the wall clock around a
// call measures them (a no-op on the CPU).
void settle(const TowerInput& in) {
  if (in.pixel_values.is_cuda()) {
    torch::cuda::synchronize(in.pixel_values.device().index());
  }
}

double run_once(
    const models::QwenVisionModel& m, const TowerInput& in, TimingRun run) {
  settle(in);
  const double start = now(run.cpu_clock);
  if (run.forward_only) {
    torch::NoGradGuard no_grad;
    m.tower(in);
  } else {
    m.module->zero_grad();
    std::vector<at::Tensor> outs = m.tower(in);
    at::Tensor loss = at::zeros({}, outs[0].options());
    for (const auto& o : outs) {
      loss = loss + o.sum();
    }
    loss.backward();
  }
  settle(in);
  return now(run.cpu_clock) - start;
}

}  // namespace

double time_tower(
    const models::QwenVisionModel& m, const TowerInput& in, TimingRun run) {
  FRAMESHARD_CHECK(
      !(run.cpu_clock && in.pixel_values.is_cuda()),
      "time_tower",
      "expected the wall clock for a tower on a GPU (the process CPU time "
      "does not see its kernels), got the CPU clock");
  std::vector<double> t;
  for (int r = 0; r < std::max(1, run.repeats); ++r) {
    t.push_back(run_once(m, in, run));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

PieceExchange standin_exchange(const ShardPlan& plan, int64_t rank) {
  const RankShard& rs = plan.ranks.at(static_cast<size_t>(rank));
  std::vector<std::pair<int64_t, int64_t>> segments;  // local rows, rest
  for (const FramePiece& p : rs.pieces) {
    const int64_t unit = rs.units.at(static_cast<size_t>(p.frame));
    segments.emplace_back(
        rs.cu_seqlens.at(static_cast<size_t>(p.frame)),
        plan.frames.units.at(static_cast<size_t>(unit)).patch_rows - p.rows());
  }
  const std::vector<FramePiece> pieces = rs.pieces;
  return [segments, pieces](const at::Tensor& rows) {
    std::vector<at::Tensor> out{rows};
    for (size_t j = 0; j < pieces.size(); ++j) {
      out.push_back(at::cat(
          {rows.narrow(0, segments[j].first, pieces[j].rows()),
           at::zeros({segments[j].second, rows.size(1)}, rows.options())}));
    }
    return out;
  };
}

std::vector<double> time_rank_shares(
    const models::QwenVisionModel& m,
    const ShardPlan& plan,
    const at::Tensor& pixels,
    TimingRun run) {
  std::vector<double> out;
  for (int64_t r = 0; r < plan.options.world; ++r) {
    TowerInput in = local_tower_input(plan, r, pixels);
    if (plan.split) {
      in.exchange = standin_exchange(plan, r);
    }
    out.push_back(time_tower(m, in, run));
  }
  return out;
}

at::Tensor random_pixels(
    const models::QwenVisionModel& m, const std::vector<GridThw>& grid) {
  int64_t rows = 0;
  for (const GridThw& g : grid) {
    rows += g.patches();
  }
  return at::randn({rows, m.config.in_features()})
      .to(first_parameter(m).options());
}

}  // namespace cli
}  // namespace frameshard
