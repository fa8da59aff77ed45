// Times a Hugging Face Qwen-VL-family vision tower through frameshard's
// encode path (load_qwen_vision + frameshard::encode over a one-rank Gloo
// group, i.e. exactly what `frameshard encode --nproc 1` runs), forward only
// and forward + backward. bench/tower_speed.py drives it next to
// transformers' own tower with the same weights, inputs, dtype and threads.
//
// Usage:
//   frameshard_tower_bench --model-dir DIR --inputs in.safetensors
//       [--dtype float32|bfloat16] [--threads 2] [--repeats 3] [--warmup 1]
//       [--device cpu|cuda]
// Prints one JSON object: {"forward_ms": [...], "forward_backward_ms": [...],
// "rows": R, "tokens": T, "torch": "2.15.0", "threads": N, "device": D}.
// On cuda (GPU 0) each timed call is bracketed by a device synchronize.

#include <frameshard/models/qwen_vision.h>
#include <frameshard/models/safetensors.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/process_group.h>

#include <torch/torch.h>
#include <torch/version.h>
#include "bench_options.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string model_dir;
  std::string inputs;
  int threads = 2;
  frameshard::bench::TimingOptions timing;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"Times a Qwen-VL vision tower through frameshard::encode."};
  app.add_option("--model-dir", a.model_dir)->required();
  app.add_option("--inputs", a.inputs)->required();
  app.add_option("--threads", a.threads)->check(CLI::PositiveNumber);
  frameshard::bench::add_timing_options(app, a.timing);
  frameshard::bench::parse_or_exit(app, argc, argv);
  return a;
}

// Waits for the GPU's queued kernels (a no-op on the CPU), so that the
// wall clock measures them rather than their launch.
void settle(const at::Tensor& t) {
  if (t.is_cuda()) {
    torch::cuda::synchronize(t.device().index());
  }
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

void print_list(const char* key, const std::vector<double>& v) {
  std::cout << "\"" << key << "\": [";
  for (size_t i = 0; i < v.size(); ++i) {
    std::cout << (i ? ", " : "") << v[i];
  }
  std::cout << "]";
}

int run(const Args& a) {
  at::set_num_threads(a.threads);
  frameshard::models::QwenLoadOptions lo;
  lo.dtype = a.timing.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  auto model = frameshard::models::load_qwen_vision(a.model_dir, lo);
  const c10::Device device(a.timing.device);
  model.module->to(device);
  auto inputs = frameshard::models::load_safetensors(a.inputs);
  at::Tensor pixels = inputs.at("pixel_values").to(device, lo.dtype);
  at::Tensor grid = inputs.at("grid_thw").to(device, at::kLong);

  auto store = c10::make_intrusive<c10d::HashStore>();
  auto pg = frameshard::make_gloo_group(store, 0, 1);
  frameshard::EncodeOptions eo;
  eo.plan.world = 1;
  eo.plan.layout = frameshard::models::media_layout(model.config);

  std::vector<double> fwd, fwd_bwd;
  int64_t tokens = 0;
  for (int i = 0; i < a.timing.warmup + a.timing.repeats; ++i) {
    {
      torch::NoGradGuard no_grad;
      settle(pixels);
      const auto t0 = std::chrono::steady_clock::now();
      auto res = frameshard::encode(model.tower, pixels, grid, pg, eo);
      tokens = res.outputs[0].size(0);
      settle(pixels);
      if (i >= a.timing.warmup) {
        fwd.push_back(ms_since(t0));
      }
    }
    settle(pixels);
    const auto t0 = std::chrono::steady_clock::now();
    auto res = frameshard::encode(model.tower, pixels, grid, pg, eo);
    at::Tensor loss = res.outputs[0].to(at::kFloat).square().mean();
    for (size_t k = 1; k < res.outputs.size(); ++k) {
      loss = loss + res.outputs[k].to(at::kFloat).square().mean();
    }
    loss.backward();
    settle(pixels);
    if (i >= a.timing.warmup) {
      fwd_bwd.push_back(ms_since(t0));
    }
    model.module->zero_grad();
  }
  std::cout << "{";
  print_list("forward_ms", fwd);
  std::cout << ", ";
  print_list("forward_backward_ms", fwd_bwd);
  std::cout << ", \"rows\": " << pixels.size(0) << ", \"tokens\": " << tokens
            << ", \"threads\": " << at::get_num_threads() << ", \"torch\": \""
            << TORCH_VERSION << "\", \"device\": \"" << a.timing.device << "\"}"
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frameshard_tower_bench: %s\n", e.what());
    return 2;
  }
}
