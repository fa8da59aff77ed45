// The embedded default recipe of `frameshard train` and `frameshard ab`
// (train_config.h): what runs with no arguments, and what
// `frameshard train --print-config` shows.
#include <frameshard/train/train_config.h>

namespace frameshard {
namespace train {
namespace {

// Sizing, measured with scale_workload(preset_workload("mixed", s), 6) over
// the first 30 steps' seeds (data_batch.h draws a new batch per step):
// 3.2k to 13.4k patch rows per step, 8.1k on average (about 2k media tokens
// plus 1.2k text tokens), 334 frame units. At scale 5 the largest steps
// reach 18k rows; at 8, 2.4k-row steps leave the tower too little work for
// its time to stand out from the decoder's. A depth-2, width-64 tower then
// takes well under a second per step on one core.
constexpr const char* kDefaultRecipe =
    R"yaml(# frameshard's embedded default recipe: a small Qwen3-VL-style VLM trained
# with context parallelism 2 on this machine's CPU (Gloo), on seeded
# synthetic "mixed" batches (one or two large images among many small video
# frames and images). `frameshard ab` runs it twice, vision frame sharding
# on and off, and compares step time, vision time, peak memory and loss.
distributed:
  cp_size: 2
  dp_size: 1
  multimodal:
    vision:
      frame_sharding:
        enabled: true
        mesh_dims: [cp]
        # Automodel's 2048 merged tokens scaled like the batch (h and w / 6
        # divide tokens by 36); min_frames needs no scaling (t is kept).
        # Either threshold alone shards: every mixed batch has at least 129
        # frame units and 800 tokens, so every step shards.
        min_tokens: 56
        min_frames: 32
        # Each rank holds thousands of patch rows: no floor frames are added.
        min_local_patch_rows: 96
        cost_alpha: auto      # FLOPs of the tower below (tower follows
        partitioner: optimal  # model.tower when not set here)
model:
  tower: qwen3-vl
  model_dir: ""
  vision_depth: 2
  vision_hidden: 64
  vision_heads: 2
  deepstack_layers: 1
  text_hidden: 64
  text_layers: 2
  text_heads: 4
  text_ffn: 128
  vocab_size: 256
  vision_dp_over_cp: false
  vision_checkpointing: false
data:
  preset: mixed
  manifest: ""
  # h and w divided by 6: about 8k patch rows (3k to 13k) per step.
  scale: 6
  text_tokens: 16
  samples_per_step: 4
  # preset grpo only: samples per prompt, and spread (each group over every
  # DP replica) or contiguous (one group per replica).
  group_size: 8
  group_order: spread
  seed: 0
train:
  steps: 30
  lr: 0.001
  weight_decay: 0.01
  dtype: float32
  seed: 0
  timeout_ms: 120000
)yaml";

}  // namespace

const char* default_train_config_yaml() {
  return kDefaultRecipe;
}

TrainConfig default_train_config() {
  static const TrainConfig kDefault =
      parse_train_config(kDefaultRecipe, "<default recipe>");
  return kDefault;
}

}  // namespace train
}  // namespace frameshard
