// A training step's inputs on one rank (local_batch.h).
#include "train/local_batch.h"

#include <frameshard/owner_route.h>
#include <frameshard/train/cp_attention.h>

#include "train/vlm_parts.h"

#include <vector>

namespace frameshard {
namespace train {
namespace detail {
namespace {

at::Tensor long_tensor(const std::vector<int64_t>& v, c10::Device d) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(d);
}

}  // namespace

LocalBatch local_batch(
    const Trainer& t,
    const TrainConfig& c,
    int64_t step,
    at::ScalarType dtype,
    c10::Device d,
    int64_t features) {
  LocalBatch b;
  b.layout = t.batch(step);
  const int64_t cp = c.parallel.cp_size;
  b.pixels =
      batch_pixels(b.layout, c.data, step, t.dp_rank(), features, dtype).to(d);
  b.grid = grid_to_tensor(b.layout.grid, d);
  const auto pos = cp_local_positions(b.layout.seq_len(), cp, t.cp_rank());
  std::vector<int64_t> tokens, labels, media_rows, media_src;
  // media_index[p]: the visual row of media position p (sequence order).
  std::vector<int64_t> media_index(b.layout.tokens.size(), -1);
  int64_t next = 0;
  for (size_t p = 0; p < b.layout.tokens.size(); ++p) {
    if (b.layout.tokens[p] == kMediaToken) {
      media_index[p] = next++;
    }
    b.label_count += b.layout.labels[p] != kIgnoreLabel ? 1 : 0;
  }
  for (size_t i = 0; i < pos.size(); ++i) {
    const auto p = static_cast<size_t>(pos[i]);
    tokens.push_back(b.layout.tokens[p]);
    labels.push_back(b.layout.labels[p]);
    if (media_index[p] >= 0) {
      media_rows.push_back(static_cast<int64_t>(i));
      media_src.push_back(media_index[p]);
    }
  }
  b.positions = long_tensor(pos, d);
  b.tokens = long_tensor(tokens, d);
  b.labels = long_tensor(labels, d);
  b.media_rows = long_tensor(media_rows, d);
  b.media_src = long_tensor(media_src, d);
  return b;
}

// gather: owner. Each visual token goes to the CP rank whose load-balanced
// chunks hold its position; encode then returns this rank's rows only, in
// ascending token order, which is the order of its local media rows.
void route_to_owners(LocalBatch& b, int64_t cp, EncodeOptions& eo) {
  std::vector<int64_t> media_positions;
  for (size_t p = 0; p < b.layout.tokens.size(); ++p) {
    if (b.layout.tokens[p] == kMediaToken) {
      media_positions.push_back(static_cast<int64_t>(p));
    }
  }
  eo.token_owner = visual_token_owners(
      media_positions, b.layout.seq_len(), cp, SequenceSplit::kLoadBalanced);
  b.media_src = at::arange(b.media_rows.size(0), b.media_rows.options());
}

}  // namespace detail

at::Tensor batch_pixels(
    const BatchLayout& batch,
    const DataConfig& data,
    int64_t step,
    int64_t dp_rank,
    int64_t features,
    at::ScalarType dtype) {
  if (!batch.media_seed.empty()) {
    return detail::media_pixels(batch.grid, batch.media_seed, features, dtype);
  }
  int64_t rows = 0;
  for (const auto& g : batch.grid) {
    rows += g.t * g.h * g.w;
  }
  return detail::synthetic_pixels(
      rows, features, static_cast<uint64_t>(data.seed), step, dp_rank, dtype);
}

}  // namespace train
}  // namespace frameshard
