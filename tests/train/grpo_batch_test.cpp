// The grpo preset of the training data (frameshard/train/data_batch.h) and
// its recipe keys data.group_size and data.group_order: a
// step's dp prompts, each sampled group_size times, dealt to the replicas
// spread or contiguous; every repeat of a prompt's medium has the same grid,
// pixel seed and bit-identical pixel rows (batch_pixels), in one microbatch
// and across replicas; the other presets draw as before.
#include <frameshard/train/data_batch.h>
#include <frameshard/train/train_config.h>
#include <frameshard/train/trainer.h>
#include <frameshard/workload.h>

#include "testing/expect_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace frameshard {
namespace train {
namespace {

using frameshard::testing::error_of;
using frameshard::testing::expect_contains;

const MediaLayout kGrpoLayout{};

DataConfig grpo_data(int64_t group_size, const std::string& order) {
  DataConfig d;
  d.preset = "grpo";
  d.scale = 24;
  d.text_tokens = 2;
  d.group_size = group_size;
  d.group_order = order;
  return d;
}

BatchLayout replica_batch(
    const DataConfig& d, int64_t dp_rank, int64_t dp_size) {
  return synthetic_batch(d, kGrpoLayout, {64, 4, 3, dp_rank, dp_size});
}

// The prompt seeds of the step, from the grids and seeds of both replicas:
// each prompt's media are one run of seeds repeated group_size times.
std::vector<uint64_t> distinct_seeds(const std::vector<BatchLayout>& bs) {
  std::set<uint64_t> s;
  for (const auto& b : bs) {
    s.insert(b.media_seed.begin(), b.media_seed.end());
  }
  return {s.begin(), s.end()};
}

TEST(GrpoBatch, ContiguousGivesEachReplicaItsPromptsGroup) {
  const DataConfig d = grpo_data(4, "contiguous");
  const BatchLayout r0 = replica_batch(d, 0, 2);
  const BatchLayout r1 = replica_batch(d, 1, 2);
  for (const BatchLayout* b : {&r0, &r1}) {
    ASSERT_EQ(b->media_seed.size(), b->grid.size());
    ASSERT_EQ(b->grid.size() % 4, 0u);
    const std::size_t n = b->grid.size() / 4;  // one prompt's media
    for (std::size_t m = 0; m < b->grid.size(); ++m) {
      EXPECT_EQ(b->grid[m], b->grid[m % n]) << m;
      EXPECT_EQ(b->media_seed[m], b->media_seed[m % n]) << m;
    }
    // Within a prompt every medium has its own seed.
    const std::set<uint64_t> own(
        b->media_seed.begin(), b->media_seed.begin() + static_cast<long>(n));
    EXPECT_EQ(own.size(), n);
  }
  // Two prompts, one per replica, nothing shared.
  std::set<uint64_t> shared;
  for (uint64_t s : r0.media_seed) {
    if (std::count(r1.media_seed.begin(), r1.media_seed.end(), s) > 0) {
      shared.insert(s);
    }
  }
  EXPECT_TRUE(shared.empty());
}

TEST(GrpoBatch, SpreadDealsEveryGroupOverAllReplicas) {
  // dp 2, G 4: the step's order is p0 p0 p0 p0 p1 p1 p1 p1; replica r takes
  // samples r, r + 2, r + 4, r + 6: p0 p0 p1 p1 on both.
  const DataConfig d = grpo_data(4, "spread");
  const BatchLayout r0 = replica_batch(d, 0, 2);
  const BatchLayout r1 = replica_batch(d, 1, 2);
  EXPECT_EQ(r0.grid, r1.grid);
  EXPECT_EQ(r0.media_seed, r1.media_seed);
  EXPECT_NE(r0.tokens, r1.tokens);  // each replica's own text
  const BatchLayout c0 = replica_batch(grpo_data(4, "contiguous"), 0, 2);
  const BatchLayout c1 = replica_batch(grpo_data(4, "contiguous"), 1, 2);
  // The same prompts as contiguous, in other places.
  EXPECT_EQ(distinct_seeds({r0, r1}), distinct_seeds({c0, c1}));
  const std::size_t n0 = c0.grid.size() / 4;
  const std::size_t n1 = c1.grid.size() / 4;
  ASSERT_EQ(r0.grid.size(), 2 * n0 + 2 * n1);
  for (std::size_t m = 0; m < n0; ++m) {
    EXPECT_EQ(r0.media_seed[m], c0.media_seed[m]);
    EXPECT_EQ(r0.media_seed[n0 + m], c0.media_seed[m]);
  }
  for (std::size_t m = 0; m < n1; ++m) {
    EXPECT_EQ(r0.media_seed[2 * n0 + m], c1.media_seed[m]);
  }
}

TEST(GrpoBatch, AtDpOneBothOrdersAreOneGroup) {
  const BatchLayout s = replica_batch(grpo_data(3, "spread"), 0, 1);
  const BatchLayout c = replica_batch(grpo_data(3, "contiguous"), 0, 1);
  EXPECT_EQ(s.grid, c.grid);
  EXPECT_EQ(s.media_seed, c.media_seed);
  EXPECT_EQ(s.tokens, c.tokens);
  // A prompt is a scaled grpo prompt: 17 frame units or more, three times.
  EXPECT_GE(expand_frames(s.grid, kGrpoLayout).units.size(), 3u * 17u);
}

TEST(GrpoBatch, RepeatsHaveBitIdenticalPixelsInAndAcrossReplicas) {
  const DataConfig d = grpo_data(4, "spread");
  const BatchLayout r0 = replica_batch(d, 0, 2);
  const BatchLayout r1 = replica_batch(d, 1, 2);
  const at::Tensor p0 = batch_pixels(r0, d, 3, 0, 12, at::kBFloat16);
  const at::Tensor p1 = batch_pixels(r1, d, 3, 1, 12, at::kBFloat16);
  EXPECT_TRUE(at::equal(p0, p1));  // spread: the same samples
  // Within the batch: rows of each medium equal those of its first copy,
  // different from every other medium's.
  const FrameSet f = expand_frames(r0.grid, kGrpoLayout);
  std::vector<int64_t> offset{0};
  for (const GridThw& g : r0.grid) {
    offset.push_back(offset.back() + g.patches());
  }
  ASSERT_EQ(p0.size(0), offset.back());
  for (std::size_t m = 1; m < r0.grid.size(); ++m) {
    const auto first = static_cast<std::size_t>(
        std::find(
            r0.media_seed.begin(), r0.media_seed.end(), r0.media_seed[m]) -
        r0.media_seed.begin());
    const at::Tensor rows = p0.narrow(0, offset[m], r0.grid[m].patches());
    if (first < m) {
      EXPECT_TRUE(at::equal(
          rows, p0.narrow(0, offset[first], r0.grid[first].patches())))
          << "medium " << m << " repeats " << first;
    } else if (r0.grid[m] == r0.grid[m - 1]) {
      EXPECT_FALSE(at::equal(
          rows, p0.narrow(0, offset[m - 1], r0.grid[m - 1].patches())));
    }
  }
  EXPECT_GT(f.units.size(), 0u);
}

TEST(GrpoBatch, OtherPresetsDrawAsBeforeWithoutMediaSeeds) {
  for (const std::string preset : {"doc", "multi", "video", "mixed"}) {
    DataConfig d;
    d.preset = preset;
    d.scale = 8;
    const BatchLayout b = synthetic_batch(d, kGrpoLayout, {64, 4, 2, 1});
    EXPECT_TRUE(b.media_seed.empty()) << preset;
    // dp_size does not change them.
    EXPECT_EQ(synthetic_batch(d, kGrpoLayout, {64, 4, 2, 1, 4}).grid, b.grid);
    Workload wl = preset_workload(preset, 0);
    EXPECT_TRUE(wl.media_ids.empty()) << preset;
  }
}

TEST(GrpoBatch, BadGroupsAndRanksAreErrorsNamingTheKey) {
  const std::string fn = "frameshard::train::synthetic_batch: ";
  expect_contains(
      error_of([] { replica_batch(grpo_data(0, "spread"), 0, 1); }),
      fn + "data.group_size: expected a positive integer, got 0");
  expect_contains(
      error_of([] { replica_batch(grpo_data(2, "random"), 0, 1); }),
      fn + "data.group_order: expected one of spread, contiguous, got "
           "\"random\"");
  expect_contains(
      error_of([] { replica_batch(grpo_data(2, "spread"), 2, 2); }),
      fn + "expected 0 <= dp_rank < dp_size, got dp_rank 2 and dp_size 2");
}

TEST(GrpoRecipe, GroupKeysDefaultParseOverrideAndNameTheKeyInErrors) {
  const TrainConfig d = default_train_config();
  EXPECT_EQ(d.data.group_size, 8);
  EXPECT_EQ(d.data.group_order, "spread");
  TrainConfig c = parse_train_config(
      "data: {preset: grpo, group_size: 16, group_order: contiguous}\n");
  EXPECT_EQ(c.data.preset, "grpo");
  EXPECT_EQ(c.data.group_size, 16);
  EXPECT_EQ(c.data.group_order, "contiguous");
  apply_train_override(c, "data.group_size", "4");
  apply_train_override(c, "data.group_order", "spread");
  EXPECT_EQ(c.data.group_size, 4);
  EXPECT_EQ(c.data.group_order, "spread");
  const std::string cfg = "frameshard::config: ";
  expect_contains(
      error_of([] { parse_train_config("data: {group_size: 0}\n", "r.yaml"); }),
      cfg +
          "data.group_size: expected a positive integer, got 0 (in "
          "r.yaml:1)");
  expect_contains(
      error_of([] { parse_train_config("data: {group_order: shuffled}\n"); }),
      cfg +
          "data.group_order: expected one of spread, contiguous, got "
          "shuffled");
  expect_contains(
      error_of([&] { apply_train_override(c, "data.group_size", "-8"); }),
      cfg + "data.group_size: expected a positive integer, got -8");
  expect_contains(
      error_of([&] { apply_train_override(c, "data.group_order", "random"); }),
      cfg +
          "data.group_order: expected one of spread, contiguous, got "
          "random");
  EXPECT_EQ(c.data.group_size, 4);  // unchanged by the failed overrides
}

}  // namespace
}  // namespace train
}  // namespace frameshard
