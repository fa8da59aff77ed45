// File: tests/train/tiny_recipe.h
//
// The recipe of the trainer tests (trainer_test.cpp, mesh_trainer_test.cpp).
#pragma once

#include <frameshard/train/train_config.h>

#include <cstdint>
#include <string>

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

}  // namespace testing
}  // namespace frameshard
