// !!! Internal header of frameshard::train, not installed. !!!
//
// A training step's inputs on one rank: the packed sequence of its DP
// replica (Trainer::batch), the replica's pixel rows (one seeded draw per
// step and replica, or per medium where the batch sets media_seed, the
// grpo preset), and this CP rank's load-balanced share of the positions
// with the media rows it holds. Defined in src/train/local_batch.cpp.
#pragma once

#include <frameshard/runtime/encode.h>
#include <frameshard/train/data_batch.h>
#include <frameshard/train/train_config.h>
#include <frameshard/train/trainer.h>

#include <ATen/ATen.h>

#include <cstdint>

namespace frameshard {
namespace train {
namespace detail {

// The step's inputs on this rank: the packed sequence of its DP replica
// and this CP rank's share of it.
struct LocalBatch {
  BatchLayout layout;
  at::Tensor pixels;        // [rows, features], the replica's media
  at::Tensor grid;          // int64 [media, 3]
  at::Tensor positions;     // int64 [local]: global positions held here
  at::Tensor tokens;        // int64 [local]
  at::Tensor labels;        // int64 [local]
  at::Tensor media_rows;    // int64: local rows that hold media tokens
  at::Tensor media_src;     // int64: their rows in the visual embeddings
  int64_t label_count = 0;  // labels of the whole replica (the divisor)
};

/// The batch of `step` on the rank of `t`, on device `d`; pixel rows of
/// `features` columns in `dtype`.
LocalBatch local_batch(
    const Trainer& t,
    const TrainConfig& c,
    int64_t step,
    at::ScalarType dtype,
    c10::Device d,
    int64_t features);

/// gather: owner. Sets eo.token_owner (each visual token to the CP rank
/// whose chunks hold its position) and makes b.media_src index the rows
/// encode then returns to this rank (its own, ascending).
void route_to_owners(LocalBatch& b, int64_t cp, EncodeOptions& eo);

}  // namespace detail
}  // namespace train
}  // namespace frameshard
