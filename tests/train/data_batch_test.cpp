// The token layout of a training step (frameshard/train/data_batch.h):
// synthetic batches (deterministic, different per step and DP rank, the
// layout and label rules), the JSONL manifest reader and its errors, and
// packed manifest steps.
#include <frameshard/media_manifest.h>
#include <frameshard/train/data_batch.h>
#include <frameshard/train/train_config.h>
#include <frameshard/workload.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "testing/expect_error.h"

namespace frameshard {
namespace train {
namespace {

using frameshard::testing::error_of;
using frameshard::testing::expect_contains;

const MediaLayout kLayout{};  // merge 2

bool is_text(int64_t id) {
  return id >= kFirstTextToken;
}

// The banner's rules, checked position by position.
void expect_layout_rules(
    const BatchLayout& b, int64_t pad_multiple, int64_t vocab_size) {
  ASSERT_EQ(b.labels.size(), b.tokens.size());
  EXPECT_EQ(b.seq_len() % pad_multiple, 0);
  int64_t media = 0;
  int64_t text = 0;
  for (const GridThw& g : b.grid) {
    media += g.patches() / 4;
  }
  EXPECT_EQ(b.media_tokens, media);
  EXPECT_EQ(std::count(b.tokens.begin(), b.tokens.end(), kMediaToken), media);
  for (int64_t id : b.tokens) {
    text += is_text(id);
    EXPECT_LT(id, vocab_size);
    EXPECT_GE(id, 0);
  }
  EXPECT_EQ(b.text_tokens, text);
  // Padding only at the end, fewer than pad_multiple positions.
  const int64_t used = b.media_tokens + b.text_tokens;
  EXPECT_LT(b.seq_len() - used, pad_multiple);
  for (int64_t i = used; i < b.seq_len(); ++i) {
    EXPECT_EQ(b.tokens[static_cast<std::size_t>(i)], kPadToken);
  }
  for (std::size_t i = 0; i < b.tokens.size(); ++i) {
    const bool next_text = i + 1 < b.tokens.size() && is_text(b.tokens[i + 1]);
    EXPECT_EQ(b.labels[i], next_text ? b.tokens[i + 1] : kIgnoreLabel)
        << "position " << i;
  }
  // Each medium starts where media_offsets says, as one run of its tokens.
  ASSERT_EQ(b.media_offsets.size(), b.grid.size());
  for (std::size_t m = 0; m < b.grid.size(); ++m) {
    const auto at = static_cast<std::size_t>(b.media_offsets[m]);
    const auto n = static_cast<std::size_t>(b.grid[m].patches() / 4);
    ASSERT_LE(at + n, b.tokens.size());
    for (std::size_t k = 0; k < n; ++k) {
      EXPECT_EQ(b.tokens[at + k], kMediaToken);
    }
  }
}

DataConfig data_for(const std::string& preset, int64_t scale = 8) {
  DataConfig d;
  d.preset = preset;
  d.scale = scale;
  return d;
}

// -------------------------------------------------------------- synthetic

TEST(SyntheticBatch, IsDeterministicInConfigStepAndRank) {
  const DataConfig d = data_for("mixed");
  const BatchLayout a = synthetic_batch(d, kLayout, {256, 4, 3, 1});
  const BatchLayout b = synthetic_batch(d, kLayout, {256, 4, 3, 1});
  EXPECT_EQ(a.grid, b.grid);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.labels, b.labels);
}

TEST(SyntheticBatch, DiffersAcrossStepsRanksAndSeeds) {
  DataConfig d = data_for("multi");
  const BatchLayout base = synthetic_batch(d, kLayout, {256, 4, 0, 0});
  EXPECT_NE(synthetic_batch(d, kLayout, {256, 4, 1, 0}).tokens, base.tokens);
  EXPECT_NE(synthetic_batch(d, kLayout, {256, 4, 0, 1}).tokens, base.tokens);
  // Step and rank are mixed, not added: (1, 0) and (0, 1) differ too.
  EXPECT_NE(
      synthetic_batch(d, kLayout, {256, 4, 1, 0}).tokens,
      synthetic_batch(d, kLayout, {256, 4, 0, 1}).tokens);
  d.seed = 1;
  EXPECT_NE(synthetic_batch(d, kLayout, {256, 4, 0, 0}).tokens, base.tokens);
}

TEST(SyntheticBatch, FollowsTheLayoutAndLabelRulesForEveryPreset) {
  for (const std::string& preset : workload_preset_names()) {
    for (int64_t step = 0; step < 3; ++step) {
      SCOPED_TRACE(preset + " step " + std::to_string(step));
      for (int64_t pad : {1, 4, 6}) {
        expect_layout_rules(
            synthetic_batch(data_for(preset), kLayout, {300, pad, step, 0}),
            pad,
            300);
      }
    }
  }
}

TEST(SyntheticBatch, PutsTextTokensBeforeEachMediumAndAtTheEnd) {
  DataConfig d = data_for("multi");
  d.text_tokens = 5;
  const BatchLayout b = synthetic_batch(d, kLayout, {256, 1, 0, 0});
  EXPECT_EQ(b.text_tokens, 5 * static_cast<int64_t>(b.grid.size() + 1));
  int64_t at = 0;
  for (std::size_t m = 0; m < b.grid.size(); ++m) {
    EXPECT_EQ(b.media_offsets[m], at + 5);
    at = b.media_offsets[m] + b.grid[m].patches() / 4;
  }
  EXPECT_EQ(b.seq_len(), at + 5);
}

TEST(SyntheticBatch, ScalesThePresetsHeightAndWidth) {
  const BatchLayout full =
      synthetic_batch(data_for("doc", 1), kLayout, {256, 1, 2, 0});
  const BatchLayout small =
      synthetic_batch(data_for("doc", 6), kLayout, {256, 1, 2, 0});
  ASSERT_EQ(full.grid.size(), small.grid.size());
  Workload wl;
  wl.grid = full.grid;
  EXPECT_EQ(small.grid, scale_workload(wl, 6).grid);
}

TEST(SyntheticBatch, TextIsACountWithRandomRestarts) {
  const BatchLayout b =
      synthetic_batch(data_for("mixed"), kLayout, {256, 1, 0, 0});
  int64_t pairs = 0;
  int64_t successors = 0;
  for (std::size_t i = 0; i + 1 < b.tokens.size(); ++i) {
    if (is_text(b.tokens[i]) && is_text(b.tokens[i + 1])) {
      ++pairs;
      successors += b.tokens[i + 1] ==
                    kFirstTextToken + (b.tokens[i] - kFirstTextToken + 1) % 254;
    }
  }
  ASSERT_GT(pairs, 500);
  const double share = static_cast<double>(successors) / pairs;
  EXPECT_GT(share, 0.65);  // 3/4 continue the count (+ chance hits)
  EXPECT_LT(share, 0.85);
}

TEST(SyntheticBatch, DefaultRecipeStepsHoldSixToTwelveThousandPatchRows) {
  const TrainConfig c = default_train_config();
  int64_t rows = 0;
  int64_t most = 0;
  const int64_t steps = c.train.steps;
  for (int64_t step = 0; step < steps; ++step) {
    const BatchLayout b = synthetic_batch(
        c.data, kLayout, {c.model.vocab_size, 2 * c.parallel.cp_size, step, 0});
    int64_t r = 0;
    for (const GridThw& g : b.grid) {
      r += g.patches();
    }
    rows += r;
    most = std::max(most, r);
  }
  EXPECT_GE(rows / steps, 6000);
  EXPECT_LE(rows / steps, 12000);
  EXPECT_LE(most, 16000);
}

TEST(SyntheticBatch, RejectsBadArgumentsNamingThem) {
  const DataConfig d = data_for("mixed");
  const std::string fn = "frameshard::train::synthetic_batch: ";
  expect_contains(
      error_of([&] {
        synthetic_batch(d, kLayout, {2, 4, 0, 0});
      }),
      fn + "expected vocab_size >= 3");
  expect_contains(
      error_of([&] {
        synthetic_batch(d, kLayout, {256, 0, 0, 0});
      }),
      fn + "expected pad_multiple >= 1, got 0");
  expect_contains(
      error_of([&] {
        synthetic_batch(d, kLayout, {256, 4, -1, 0});
      }),
      fn + "expected step >= 0, got -1");
  expect_contains(
      error_of([&] {
        synthetic_batch(d, kLayout, {256, 4, 0, -2});
      }),
      fn + "expected dp_rank >= 0, got -2");
  DataConfig bad = d;
  bad.scale = 0;
  expect_contains(
      error_of([&] {
        synthetic_batch(bad, kLayout, {256, 4, 0, 0});
      }),
      fn + "data.scale: expected a positive integer, got 0");
  bad = d;
  bad.preset = "movies";
  expect_contains(
      error_of([&] {
        synthetic_batch(bad, kLayout, {256, 4, 0, 0});
      }),
      fn + "data.preset: expected one of doc, multi, video, mixed, grpo, "
           "got \"movies\"");
  bad = d;
  bad.text_tokens = 0;
  expect_contains(
      error_of([&] {
        synthetic_batch(bad, kLayout, {256, 4, 0, 0});
      }),
      fn + "data.text_tokens: expected a positive integer, got 0");
}

// --------------------------------------------------------------- manifest

TEST(Manifest, ParsesTextRunsInEveryFormAndSkipsBlankLines) {
  const auto samples = parse_manifest(
      "\n"
      "{\"grid_thw\": [[1, 28, 28], [4, 16, 16]], \"text_tokens\": 40}\n"
      "   \n"
      "{\"grid_thw\": [[1, 28, 28]], \"text_tokens\": [8, 32]}\r\n"
      "{\"grid_thw\": [[2, 4, 6]]}\n",
      kLayout);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].grid, (std::vector<GridThw>{{1, 28, 28}, {4, 16, 16}}));
  EXPECT_EQ(samples[0].text_runs, (std::vector<int64_t>{14, 13, 13}));
  EXPECT_EQ(samples[1].text_runs, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(samples[2].grid, (std::vector<GridThw>{{2, 4, 6}}));
  EXPECT_TRUE(samples[2].text_runs.empty());
}

TEST(Manifest, ErrorsNameTheLineTheFieldTheExpectationAndTheValue) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::string ok = "{\"grid_thw\": [[1, 4, 4]]}\n";
  const std::vector<Case> cases = {
      {ok + "\n" + "{\"grid_thw\": [[1, 4, 4], [1, 27, 28]]}\n",
       "s.jsonl:3: grid_thw[1]: expected [t, h, w] with t >= 1 and h and w "
       "positive multiples of 2 (each at most 1048576), got [1, 27, 28]"},
      {"{\"grid_thw\": [[0, 4, 4]]}\n",
       "s.jsonl:1: grid_thw[0]: expected [t, h, w] with t >= 1"},
      {"{\"grid_thw\": [[4, 4]]}\n",
       "s.jsonl:1: grid_thw[0]: expected [t, h, w]"},
      {"{\"grid_thw\": [[1, 4.0, 4]]}\n",
       "s.jsonl:1: grid_thw[0]: expected [t, h, w]"},
      {"{\"grid_thw\": [[1, 4, 4194304]]}\n",
       "s.jsonl:1: grid_thw[0]: expected [t, h, w]"},
      {"{\"grid_thw\": {}}\n",
       "s.jsonl:1: grid_thw: expected a list of [t, h, w] rows ([] for a "
       "text-only sample), got {}"},
      {"{\"text_tokens\": 3}\n",
       "s.jsonl:1: grid_thw: expected a list of [t, h, w] rows ([] for a "
       "text-only sample), got nothing"},
      {ok + "[1, 2]\n",
       "s.jsonl:2: expected a JSON object per line ({\"grid_thw\": [[t, h, "
       "w], ...], \"text_tokens\": n}), got [1,2]"},
      {"{\"grid_thw\": [[1, 4, 4]]\n",
       "s.jsonl:1: expected a JSON object per line, got invalid JSON"},
      {"{\"grid_thw\": [[1, 4, 4]], \"text_tokens\": -1}\n",
       "s.jsonl:1: text_tokens: expected a non-negative integer or a list of "
       "2 non-negative integers (text before each of the 1 media and at the "
       "end), got -1"},
      {"{\"grid_thw\": [[1, 4, 4]], \"text_tokens\": [1, 2, 3]}\n",
       "s.jsonl:1: text_tokens: expected a non-negative integer or a list of "
       "2 non-negative integers"},
      {"{\"grid_thw\": [[1, 4, 4]], \"text_tokens\": [1, -2]}\n",
       "s.jsonl:1: text_tokens: expected a non-negative integer or a list of "
       "2 non-negative integers (text before each of the 1 media and at the "
       "end), got [1, -2]"},
      {"{\"grid_thw\": [[1, 4, 4]], \"path\": \"a.png\"}\n",
       "s.jsonl:1: path: expected a known key (grid_thw, text_tokens), got "
       "unknown key path"},
      {"",
       "s.jsonl: expected at least one sample (a JSON object per line), "
       "got none"},
      {"\n  \n", "s.jsonl: expected at least one sample"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    expect_contains(
        error_of([&] { parse_manifest(c.text, kLayout, "s.jsonl"); }),
        "frameshard::train::parse_manifest: " + c.message);
  }
  // Without a source the line is named by number.
  expect_contains(
      error_of([&] { parse_manifest(ok + "7\n", kLayout); }),
      "frameshard::train::parse_manifest: line 2: expected a JSON object");
  // The merge size comes from the layout: h = 3 is fine with merge 3.
  EXPECT_NO_THROW(parse_manifest("{\"grid_thw\": [[1, 3, 6]]}", {3, 2}));
}

TEST(Manifest, LoadManifestNamesTheFile) {
  const std::string path = ::testing::TempDir() + "frameshard_shapes.jsonl";
  {
    std::ofstream out(path);
    out << "{\"grid_thw\": [[1, 4, 4]]}\n{\"grid_thw\": [[1, 27, 28]]}\n";
  }
  expect_contains(
      error_of([&] { load_manifest(path, kLayout); }),
      "frameshard::train::load_manifest: " + path + ":2: grid_thw[0]: ");
  {
    std::ofstream out(path);
    out << "{\"grid_thw\": [[1, 4, 4]]}\n";
  }
  EXPECT_EQ(load_manifest(path, kLayout).size(), 1u);
  std::remove(path.c_str());
  expect_contains(
      error_of([&] { load_manifest("/nonexistent/s.jsonl", kLayout); }),
      "frameshard::train::load_manifest: expected a readable JSONL manifest, "
      "got /nonexistent/s.jsonl");
}

// analyze and plan --manifest read the training manifest with the dataset
// reader (frameshard/media_manifest.h): both must read every training line
// alike, text-only samples included, and refuse a bad grid_thw or
// text_tokens with the same words.
TEST(Manifest, TheDatasetReaderReadsEveryTrainingLineAlike) {
  const ProcessorRule& rule = processor_rule("qwen2-vl");  // merge 2
  ASSERT_EQ(rule.merge_size, kLayout.spatial_merge_size);
  const std::string dir = std::string(FRAMESHARD_SOURCE_DIR) + "/examples/";
  std::string lines =
      "{\"grid_thw\": [], \"text_tokens\": 512}\n"
      "{\"grid_thw\": []}\n"
      "{\"grid_thw\": [[1, 28, 28], [4, 16, 16]], \"text_tokens\": 40}\n"
      "{\"grid_thw\": [[2, 4, 6]], \"text_tokens\": [0, 7]}\n";
  for (const char* file :
       {"recipes/pages_or_text.jsonl", "recipes/shapes.jsonl"}) {
    std::ifstream in(dir + file);
    ASSERT_TRUE(in.good()) << dir + file;
    lines += std::string(
                 std::istreambuf_iterator<char>(in),
                 std::istreambuf_iterator<char>()) +
             "\n";
  }
  const std::vector<ManifestSample> train = parse_manifest(lines, kLayout);
  const std::vector<MediaSample> dataset = parse_media_manifest(lines, rule);
  ASSERT_EQ(train.size(), dataset.size());
  for (std::size_t i = 0; i < train.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(train[i].grid, dataset[i].grid);
    EXPECT_EQ(train[i].text_runs, dataset[i].text_runs);
    EXPECT_EQ(train[i].grid.empty(), dataset[i].text_only());
  }
  EXPECT_TRUE(dataset[0].text_only());
  for (const char* bad :
       {"{\"grid_thw\": [[1, 27, 28]]}",
        "{\"grid_thw\": 5}",
        "{\"grid_thw\": [[1, 4, 4]], \"text_tokens\": [1, -2]}"}) {
    SCOPED_TRACE(bad);
    const std::string t = error_of([&] { parse_manifest(bad, kLayout); });
    const std::string d = error_of([&] { parse_media_manifest(bad, rule); });
    const std::string train_fn = "frameshard::train::parse_manifest: ";
    const std::string dataset_fn = "frameshard::load_media_manifest: ";
    ASSERT_EQ(t.rfind(train_fn, 0), 0u) << t;
    ASSERT_EQ(d.rfind(dataset_fn, 0), 0u) << d;
    EXPECT_EQ(t.substr(train_fn.size()), d.substr(dataset_fn.size()));
  }
}

// One medium of (1, 2, 2k) per sample k, so the grid tells which samples a
// step packed.
std::vector<ManifestSample> numbered_samples(int n) {
  std::vector<ManifestSample> s;
  for (int k = 1; k <= n; ++k) {
    s.push_back({{{1, 2, 2 * k}}, {k, 10 * k}});
  }
  return s;
}

std::vector<int64_t> packed(const BatchLayout& b) {
  std::vector<int64_t> ids;
  for (const GridThw& g : b.grid) {
    ids.push_back(g.w / 2);
  }
  return ids;
}

TEST(ManifestBatch, PacksConsecutiveSamplesPerStepAndRankCycling) {
  const auto samples = numbered_samples(5);
  DataConfig d;
  d.scale = 1;
  d.samples_per_step = 2;
  auto at = [&](int64_t step, int64_t rank) {
    return packed(manifest_batch(samples, d, kLayout, {256, 1, step, rank, 2}));
  };
  EXPECT_EQ(at(0, 0), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(at(0, 1), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(at(1, 0), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(at(1, 1), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(at(1000000007, 0), at(2, 0));  // 10^9 + 7 = 2 mod 5
}

TEST(ManifestBatch, MergesAdjacentTextRunsAndFollowsTheLayoutRules) {
  const auto samples = numbered_samples(3);
  DataConfig d;
  d.scale = 1;
  d.samples_per_step = 2;
  const BatchLayout b = manifest_batch(samples, d, kLayout, {256, 8, 0, 0});
  // Samples 1 and 2: text 1, medium (1 token), 10 + 2, medium (2), 20.
  EXPECT_EQ(b.media_offsets, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(b.text_tokens, 33);
  EXPECT_EQ(b.media_tokens, 3);
  expect_layout_rules(b, 8, 256);
  // Without text_runs, data.text_tokens around each medium.
  d.text_tokens = 3;
  d.samples_per_step = 1;
  const BatchLayout c =
      manifest_batch({{{{1, 4, 4}}, {}}}, d, kLayout, {256, 1, 0, 0});
  EXPECT_EQ(c.text_tokens, 6);
  EXPECT_EQ(c.media_offsets, (std::vector<int64_t>{3}));
}

TEST(ManifestBatch, ATextOnlySampleMakesABatchWithoutMedia) {
  // "grid_thw": [] is a text-only sample; a DP replica may draw only such
  // samples in a step (the mesh path keeps it in every collective).
  const auto samples =
      parse_manifest("{\"grid_thw\": [], \"text_tokens\": 9}\n", kLayout);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_TRUE(samples[0].grid.empty());
  EXPECT_EQ(samples[0].text_runs, (std::vector<int64_t>{9}));
  DataConfig d;
  d.scale = 2;
  d.samples_per_step = 1;
  const BatchLayout b = manifest_batch(samples, d, kLayout, {256, 4, 0, 0});
  EXPECT_TRUE(b.grid.empty());
  EXPECT_EQ(b.media_tokens, 0);
  EXPECT_EQ(b.text_tokens, 9);
  expect_layout_rules(b, 4, 256);
}

TEST(ManifestBatch, AppliesTheScaleToTheManifestGrids) {
  DataConfig d;
  d.scale = 4;
  d.samples_per_step = 1;
  const BatchLayout b =
      manifest_batch({{{{1, 64, 32}}, {}}}, d, kLayout, {256, 1, 0, 0});
  EXPECT_EQ(b.grid, (std::vector<GridThw>{{1, 16, 8}}));
}

TEST(ManifestBatch, RejectsStepsWithoutLabelsAndBadRanks) {
  DataConfig d;
  d.scale = 1;
  d.samples_per_step = 1;
  const std::vector<ManifestSample> silent{{{{1, 4, 4}}, {0, 0}}};
  expect_contains(
      error_of([&] {
        manifest_batch(silent, d, kLayout, {256, 1, 0, 0});
      }),
      "frameshard::train::manifest_batch: expected a text token after the "
      "first position (a label to train on), got none in a sequence of 4 "
      "media and 0 text tokens");
  const auto samples = numbered_samples(2);
  expect_contains(
      error_of([&] {
        manifest_batch(samples, d, kLayout, {256, 1, 0, 2, 2});
      }),
      "expected 0 <= dp_rank < dp_size, got dp_rank 2 and dp_size 2");
  expect_contains(
      error_of([&] {
        manifest_batch({}, d, kLayout, {256, 1, 0, 0});
      }),
      "expected at least one sample, got none");
  expect_contains(
      error_of([&] {
        manifest_batch({{{{1, 4, 4}}, {1}}}, d, kLayout, {256, 1, 0, 0});
      }),
      "sample 0: expected no text runs or 2");
}

TEST(Manifest, HostileLinesGiveShortErrorsNotCrashes) {
  const MediaLayout layout;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string big_key(1 << 20, 'k');
  for (const std::string& line :
       {"{\"grid_thw\": " + deep + "}",
        std::string("{\"grid_thw\": [[1, 2, 2]], \"grid_thw\": [[1, 4, 4]]}"),
        std::string("{\"grid_thw\": [[1, 2, 2]], \"text_tokens\": 1e400}"),
        "{\"" + big_key + "\": 1}"}) {
    try {
      parse_manifest(line + "\n", layout, "hostile.jsonl");
      ADD_FAILURE() << "expected an error for " << line.substr(0, 60);
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("hostile.jsonl:1"), std::string::npos) << msg;
      EXPECT_LT(msg.size(), 1200u) << msg.substr(0, 300);
    }
  }
}

}  // namespace
}  // namespace train
}  // namespace frameshard
