// Split frames in the runtime: the exchange's routing from a plan (every row
// of a split frame reaches every other holder, nothing else moves), and the
// failure paths of a split plan's extra collectives: a rank whose tower
// raises before or between the exchanges, or whose plan is not split, makes
// every rank raise the same error instead of leaving its peers waiting in an
// exchange; with the tower's exchanges declared (one consensus a call), the
// same failures and the same outputs. Parity of split frames per tower
// family is in qwen_towers_test.cpp.

#include <frameshard/models/cost_bridge.h>
#include <frameshard/models/toy_tower.h>
#include <frameshard/runtime/encode.h>

#include "runtime/piece_exchange.h"
#include "testing/qwen_fixtures.h"
#include "testing/rank_errors.h"
#include "testing/run_ranks.h"
#include "testing/test_tower.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using testing::expect_same_error_everywhere;
using testing::run_ranks_collect;

PlanOptions split_options(int world, const models::QwenVisionConfig& cfg) {
  PlanOptions o = testing::always_shard(world);
  o.layout = models::media_layout(cfg);
  o.cost = flop_cost_model(models::tower_dims(cfg));
  o.split.enabled = true;
  o.split.window_side = models::split_window_side(cfg);
  o.split.exchange_row_cost = 1.0;  // tiny widths (qwen_towers_test.cpp)
  return o;
}

TEST(PieceRoute, EveryHolderReceivesEveryOtherPieceOfItsFrames) {
  const auto cfg = testing::tiny_config(models::QwenFamily::kQwen2VL);
  for (int world : {2, 3, 4}) {
    const ShardPlan plan = make_plan(
        {{1, 4, 4}, {1, 32, 16}, {1, 4, 4}}, split_options(world, cfg));
    ASSERT_TRUE(plan.split) << "world " << world;
    std::vector<internal::PieceRoute> routes;
    for (int r = 0; r < world; ++r) {
      routes.push_back(internal::piece_route(plan, r));
    }
    for (int r = 0; r < world; ++r) {
      const RankShard& rs = plan.ranks[static_cast<size_t>(r)];
      const auto& route = routes[static_cast<size_t>(r)];
      ASSERT_EQ(route.parts.size(), rs.pieces.size());
      for (int q = 0; q < world; ++q) {
        // The all-to-all's counts match pairwise.
        EXPECT_EQ(
            route.send_counts[static_cast<size_t>(q)],
            routes[static_cast<size_t>(q)].recv_counts[static_cast<size_t>(r)])
            << r << " -> " << q;
      }
      EXPECT_EQ(route.send_counts[static_cast<size_t>(r)], 0);
      EXPECT_EQ(
          static_cast<int64_t>(route.send_rows.size()),
          route.sent_by_rank[static_cast<size_t>(r)]);
      int64_t received = 0;
      for (size_t j = 0; j < rs.pieces.size(); ++j) {
        // The parts tile the whole frame, its own piece among them.
        const FramePiece& p = rs.pieces[j];
        const FrameUnit& u =
            plan.frames.units[static_cast<size_t>(rs.units[p.frame])];
        int64_t rows = 0;
        int own = 0;
        for (const auto& part : route.parts[j]) {
          rows += part.rows;
          own += part.source < 0 ? 1 : 0;
          received += part.source < 0 ? 0 : part.rows;
        }
        EXPECT_EQ(rows, u.patch_rows);
        EXPECT_EQ(own, 1);
        EXPECT_EQ(rs.exchange_rows, received) << "rank " << r;
      }
    }
  }
}

// Encode of one 32x16 frame split over `world` ranks with a tiny Qwen2-VL
// tower (two full-attention layers: two exchanges); `customize` may change
// the rank's tower or options.
std::vector<testing::RankOutcome> run_split_encode(
    int world,
    const std::function<void(int, VisionTower&, EncodeOptions&)>& customize) {
  const auto cfg = testing::tiny_config(models::QwenFamily::kQwen2VL);
  const std::vector<GridThw> grid = {{1, 32, 16}};
  std::vector<models::QwenVisionModel> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(testing::random_model(cfg, at::kDouble, 3));
  }
  return run_ranks_collect(world, [&](int rank, ProcessGroupPtr pg) {
    EncodeOptions o;
    o.plan = split_options(world, cfg);
    VisionTower tower = models[static_cast<size_t>(rank)].tower;
    customize(rank, tower, o);
    at::Tensor pixels = at::randn({512, cfg.in_features()}, at::kDouble);
    auto res = encode(tower, pixels, grid_to_tensor(grid), pg, o);
    ASSERT_TRUE(res.plan.split);
    res.outputs[0].sum().backward();
  });
}

TEST(SplitFrameErrors, TowerRaisingBeforeTheFirstExchangeRaisesEverywhere) {
  const auto outcomes =
      run_split_encode(3, [](int rank, VisionTower& tower, EncodeOptions&) {
        if (rank == 1) {
          tower = [](const TowerInput&) -> std::vector<at::Tensor> {
            throw std::runtime_error("boom before the exchange");
          };
        }
      });
  expect_same_error_everywhere(
      outcomes, "rank 1 failed while running the tower: ");
  EXPECT_NE(
      outcomes[0].error.find("boom before the exchange"), std::string::npos);
}

TEST(SplitFrameErrors, TowerRaisingBetweenExchangesRaisesEverywhere) {
  const auto outcomes =
      run_split_encode(3, [](int rank, VisionTower& tower, EncodeOptions&) {
        if (rank != 2) {
          return;
        }
        tower = [inner = tower](const TowerInput& in) {
          TowerInput mine = in;
          auto calls = std::make_shared<int>(0);
          mine.exchange = [calls, ex = in.exchange](const at::Tensor& rows) {
            if (++*calls == 2) {
              throw std::runtime_error("boom in layer 2");
            }
            return ex(rows);
          };
          return inner(mine);
        };
      });
  expect_same_error_everywhere(outcomes, "rank 2 failed while running the");
  EXPECT_NE(outcomes[1].error.find("boom in layer 2"), std::string::npos);
}

// The tiny tower's exchanges, declared (EncodeOptions::tower_exchanges).
constexpr int64_t kTinyExchanges = 2;

// Rank `failing`'s tower calls `exchange(rows)` as `make` says for its
// k-th exchange (1-based): `inner` is the real one.
using ExchangeWrap = std::function<std::vector<at::Tensor>(
    int k, const PieceExchange& inner, const at::Tensor& rows)>;
void wrap_exchanges(VisionTower& tower, const ExchangeWrap& make) {
  tower = [inner = tower, make](const TowerInput& in) {
    TowerInput mine = in;
    auto calls = std::make_shared<int>(0);
    mine.exchange = [calls, ex = in.exchange, make](const at::Tensor& rows) {
      return make(++*calls, ex, rows);
    };
    return inner(mine);
  };
}

TEST(
    SplitFrameDeclaredExchanges,
    OneConsensusPerCallAndTheSameOutputsAndGradients) {
  // Each rank encodes the same split frame with the exchanges undeclared
  // (a consensus each) and declared (one): equal outputs and gradients,
  // one all-gather fewer per exchange after the first.
  const auto cfg = testing::tiny_config(models::QwenFamily::kQwen2VL);
  const std::vector<GridThw> grid = {{1, 32, 16}};
  const int world = 3;
  const auto model = testing::random_model(cfg, at::kDouble, 3);
  const at::Tensor pixels = at::randn({512, cfg.in_features()}, at::kDouble);
  std::vector<int> gathers(2 * world);
  std::vector<at::Tensor> outs(2 * world), grads(2 * world);
  testing::run_ranks(world, [&](int rank, ProcessGroupPtr pg) {
    for (int declared = 0; declared < 2; ++declared) {
      auto counting = c10::make_intrusive<testing::CountingGroup>(pg);
      EncodeOptions o;
      o.plan = split_options(world, cfg);
      o.tower_exchanges = declared ? kTinyExchanges : 0;
      const at::Tensor x = pixels.clone().requires_grad_();
      auto res = encode(model.tower, x, grid_to_tensor(grid), counting, o);
      ASSERT_TRUE(res.plan.split);
      (res.outputs[0] * static_cast<double>(rank + 1)).sum().backward();
      const auto i = static_cast<size_t>(2 * rank + declared);
      gathers[i] = counting->allgathers;
      outs[i] = res.outputs[0].detach();
      grads[i] = x.grad();
    }
  });
  for (int r = 0; r < world; ++r) {
    const auto i = static_cast<size_t>(2 * r);
    EXPECT_EQ(gathers[i] - gathers[i + 1], kTinyExchanges - 1) << "rank " << r;
    EXPECT_TRUE(at::equal(outs[i], outs[i + 1])) << "rank " << r;
    EXPECT_TRUE(at::equal(grads[i], grads[i + 1])) << "rank " << r;
  }
}

TEST(SplitFrameDeclaredExchanges, TowerRaisingAfterTheFirstRaisesEverywhere) {
  // Rank 2 raises in layer 2, after the only consensus: it sends zeros
  // through its peers' second exchange and every rank raises at encode's.
  const auto outcomes =
      run_split_encode(3, [](int rank, VisionTower& tower, EncodeOptions& o) {
        o.tower_exchanges = kTinyExchanges;
        if (rank == 2) {
          wrap_exchanges(
              tower,
              [](int k, const PieceExchange& ex, const at::Tensor& rows) {
                if (k == 2) {
                  throw std::runtime_error("boom in layer 2");
                }
                return ex(rows);
              });
        }
      });
  expect_same_error_everywhere(outcomes, "rank 2 failed while running the");
  EXPECT_NE(outcomes[0].error.find("boom in layer 2"), std::string::npos);
}

TEST(SplitFrameDeclaredExchanges, TowerMakingFewerRaisesEverywhere) {
  const auto outcomes =
      run_split_encode(3, [](int rank, VisionTower& tower, EncodeOptions& o) {
        o.tower_exchanges = kTinyExchanges;
        if (rank == 1) {
          auto first = std::make_shared<std::vector<at::Tensor>>();
          wrap_exchanges(
              tower,
              [first](int k, const PieceExchange& ex, const at::Tensor& rows) {
                if (k == 1) {
                  *first = ex(rows);
                }
                return *first;  // layer 2 skips its exchange
              });
        }
      });
  expect_same_error_everywhere(
      outcomes,
      "rank 1 failed while running the tower: frameshard::encode: [rank 1/3] "
      "expected the tower's declared 2 K/V exchanges per call "
      "(tower_exchanges), got 1");
}

TEST(SplitFrameDeclaredExchanges, TowerMakingMoreRaisesEverywhere) {
  const auto outcomes =
      run_split_encode(3, [](int, VisionTower&, EncodeOptions& o) {
        o.tower_exchanges = kTinyExchanges - 1;
      });
  expect_same_error_everywhere(outcomes, "ranks 0, 1, 2 failed");
  EXPECT_NE(
      outcomes[0].error.find("expected the tower's declared 1 K/V exchanges "
                             "per call (tower_exchanges), got one more"),
      std::string::npos);
}

TEST(SplitFrameDeclaredExchanges, RanksDeclaringDifferentCountsDisagree) {
  const auto outcomes =
      run_split_encode(3, [](int rank, VisionTower&, EncodeOptions& o) {
        o.tower_exchanges = rank == 1 ? kTinyExchanges : 0;
      });
  expect_same_error_everywhere(outcomes, "ranks disagree on the plan");
}

TEST(SplitFrameErrors, RankWhosePlanIsNotSplitRaisesEverywhere) {
  const auto outcomes =
      run_split_encode(2, [](int rank, VisionTower&, EncodeOptions& o) {
        if (rank == 1) {
          o.plan.split.enabled = false;
        }
      });
  expect_same_error_everywhere(outcomes, "ranks disagree on the plan");
}

TEST(SplitFrameErrors, ToyTowerRefusesPiecesOnEveryRank) {
  const auto outcomes =
      run_split_encode(2, [](int, VisionTower& tower, EncodeOptions&) {
        tower = models::as_vision_tower(
            models::ToyTower(models::ToyTowerOptions{}));
      });
  expect_same_error_everywhere(outcomes, "split frames need a Qwen tower");
}

}  // namespace
}  // namespace frameshard
