// File: tests/train/tiny_recipe.h
//
// The recipe of the trainer tests (trainer_test.cpp, mesh_trainer_test.cpp)
// and how they run it on one rank (run_steps).
#pragma once

#include <frameshard/train/train_config.h>
#include <frameshard/train/trainer.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace frameshard {
namespace testing {

// A model and batch small enough for a unit test: a 1-block Qwen3-VL tower
// with one DeepStack merger, a 2-block decoder, the "multi" preset scaled
// down to a few hundred patch rows.
inline train::TrainConfig tiny_train_config(
    int64_t cp, const std::string& dtype) {
  train::TrainConfig c;
  c.parallel.cp_size = cp;
  c.parallel.frame_sharding.enabled = true;
  c.parallel.frame_sharding.min_tokens = 0;
  c.parallel.frame_sharding.min_frames = 0;
  c.parallel.frame_sharding.min_local_patch_rows = 0;
  c.model.vision_depth = 2;
  c.model.vision_hidden = 16;
  c.model.vision_heads = 2;
  c.model.deepstack_layers = 1;
  c.model.text_hidden = 16;
  c.model.text_layers = 2;
  c.model.text_heads = 2;
  c.model.text_ffn = 32;
  c.model.vocab_size = 64;
  c.data.preset = "multi";
  c.data.scale = 16;
  c.data.text_tokens = 4;
  c.train.dtype = dtype;
  c.train.steps = 3;
  c.train.lr = 1e-2;
  c.train.timeout_ms = 20000;
  return c;
}

// One rank's run of the trainer tests: forward_backward(0) (its gradients
// read before any optimizer step), then step(1) .. step(steps - 1).
struct RankRun {
  train::StepMetrics first;                 // step 0's metrics
  std::vector<double> losses;               // every step's global loss
  std::map<std::string, at::Tensor> grads;  // after step 0's backward
};

inline RankRun run_steps(train::Trainer& t, int64_t steps) {
  RankRun r;
  r.first = t.forward_backward(0);
  r.losses.push_back(r.first.loss);
  for (const auto& p : t.named_parameters()) {
    r.grads[p.first] = p.second.grad().clone();
  }
  for (int64_t s = 1; s < steps; ++s) {
    r.losses.push_back(t.step(s).loss);
  }
  return r;
}

}  // namespace testing
}  // namespace frameshard
