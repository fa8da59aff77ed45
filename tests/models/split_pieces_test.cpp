// The Qwen towers on pieces of split frames (TowerInput::pieces), in one
// process without c10d: the input checks (pieces on merged tokens, inside
// their frame, in order, with an exchange; Qwen2.5-VL pieces on window
// rows), and forward parity per family: a frame cut in two, its pieces run
// on two threads that exchange keys and values through memory, gives the
// whole frame's outputs (float64, 1e-12), the positions (rotary, learned
// embeddings, windows) taken from the whole frame at each piece's offset.
// Gradients and the collective exchange are tests/dist (qwen_towers_test,
// split_frames_test).

#include <frameshard/models/cost_bridge.h>
#include <frameshard/models/qwen_vision.h>

#include "testing/qwen_fixtures.h"
#include "testing/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace frameshard {
namespace models {
namespace {

using testing::grid_tensor;
using testing::max_abs_diff;
using testing::QwenFamilyTest;
using testing::random_model;
using testing::random_pixels;
using testing::run_tower;
using testing::tiny_config;

// Two "ranks" holding one piece each of one split frame: every exchange
// call posts the piece's rows and waits for the other's (forward only).
class MemoryExchange {
 public:
  // Rank r's piece is local frame `frame`, rows [begin, end) of its local
  // rows (in the tower's row order).
  PieceExchange for_rank(int r, int64_t begin, int64_t end) {
    return [this, r, begin, end](const at::Tensor& rows) {
      std::unique_lock<std::mutex> lock(mu_);
      const int call = calls_[r]++;
      posted_[call][r] = rows.narrow(0, begin, end - begin).detach();
      cv_.notify_all();
      cv_.wait(lock, [&] { return posted_[call].size() == 2; });
      const auto& p = posted_[call];
      return std::vector<at::Tensor>{rows, at::cat({p.at(0), p.at(1)}, 0)};
    };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, int> calls_;
  std::map<int, std::map<int, at::Tensor>> posted_;
};

TEST_P(QwenFamilyTest, PiecesOnTwoThreadsGiveTheWholeFrameFloat64) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kDouble, 8);
  // A whole 4x4 frame, then a 16x8 frame cut after 64 of its 128 rows (a
  // multiple of 4 rows and, for Qwen2.5-VL's 4-patch windows, of 4*8).
  const std::vector<GridThw> grid = {{1, 4, 4}, {1, 16, 8}};
  const at::Tensor pixels = random_pixels(cfg, grid, at::kDouble);
  const at::Tensor whole = run_tower(m, pixels, grid)[0];
  const int64_t cut = 64;

  MemoryExchange ex;
  std::vector<at::Tensor> out(2);
  auto rank0 = [&] {
    TowerInput in;
    in.pixel_values = pixels.narrow(0, 0, 16 + cut);
    in.grid_thw = grid_tensor(grid);
    in.pieces = {FramePiece{1, 0, cut}};
    in.exchange = ex.for_rank(0, 16, 16 + cut);
    out[0] = m.tower(in)[0];
  };
  auto rank1 = [&] {
    TowerInput in;
    in.pixel_values = pixels.narrow(0, 16 + cut, 128 - cut);
    in.grid_thw = grid_tensor({{1, 16, 8}});
    in.pieces = {FramePiece{0, cut, 128}};
    in.exchange = ex.for_rank(1, 0, 128 - cut);
    out[1] = m.tower(in)[0];
  };
  std::thread t0(rank0), t1(rank1);
  t0.join();
  t1.join();
  ASSERT_EQ(out[0].size(0), 4 + cut / 4);
  ASSERT_EQ(out[1].size(0), (128 - cut) / 4);
  EXPECT_LE(max_abs_diff(at::cat(out, 0), whole), 1e-12);
}

TEST_P(QwenFamilyTest, ValidatesPieces) {
  const auto cfg = tiny_config(GetParam());
  const QwenVisionModel m = random_model(cfg, at::kFloat, 9);
  TowerInput in;
  in.grid_thw = grid_tensor({{1, 4, 4}, {1, 16, 8}});
  in.pixel_values = at::randn({16 + 64, cfg.in_features()});
  in.exchange = [](const at::Tensor& rows) {
    return std::vector<at::Tensor>{rows, rows};
  };
  in.pieces = {FramePiece{1, 0, 66}};
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "multiples of 4), got [0, 66)");
  in.pieces = {FramePiece{1, 64, 200}};
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "inside its 128 rows");
  in.pieces = {FramePiece{2, 0, 64}};
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "for frame 2");
  in.pieces = {FramePiece{1, 0, 32}};
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "expected 48 pixel rows");
  in.pieces = {FramePiece{1, 0, 64}};
  in.exchange = nullptr;
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "expected TowerInput::exchange");
}

TEST(Qwen2_5VLTower, PieceOffWindowRowsIsAnError) {
  const auto cfg = tiny_config(QwenFamily::kQwen2_5VL);
  const QwenVisionModel m = random_model(cfg, at::kFloat, 10);
  ASSERT_EQ(split_window_side(cfg), 4);
  TowerInput in;
  in.grid_thw = grid_tensor({{1, 16, 8}});
  in.pixel_values = at::randn({16, cfg.in_features()});
  in.pieces = {FramePiece{0, 0, 16}};  // 2 patch rows of a 4-row band
  in.exchange = [](const at::Tensor& rows) {
    return std::vector<at::Tensor>{rows, rows};
  };
  EXPECT_TORCH_ERROR_CONTAINS(m.tower(in), "to hold whole window rows");
}

// Instantiated for every family in qwen_towers_test.cpp (one binary).

}  // namespace
}  // namespace models
}  // namespace frameshard
