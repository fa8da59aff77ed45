// File: tests/testing/mesh_problem.h
//
// The problem of the encode_mesh tests (tests/dist/mesh_encode*_test.cpp):
// per replica its grid, random float64 pixels and optionally an owner map
// (the load-balanced sequence split over its cp ranks); the test tower's
// parameters; per mesh rank q * cp + k random loss weights; and the
// per-replica reference: each replica's frames through the tower in one
// process, the losses of its cp ranks summed, the gradients summed over
// replicas and divided by dp.
//
// Also the test tower of split frames, frame_context_tower: test_tower
// (testing/test_tower.h) with positions taken in the whole frame at a
// piece's offset and one "full-attention" layer -- each row adds half the
// mean of its whole frame's first-layer rows, a piece's from
// TowerInput::exchange -- so a split frame's outputs depend on its other
// pieces, wherever they are encoded.
//
// Usage:
//   torch::manual_seed(seed);
//   auto problem = testing::make_mesh_problem(replicas, cp, layout, owners,
//                                             /*frame_context=*/false);
//   auto ref = testing::mesh_reference(problem, dp);
//   // on mesh rank m: res = encode_mesh(problem.tower(params), ...);
//   //                 problem.loss_of(m, res.outputs).backward();
#pragma once

#include <frameshard/frames.h>
#include <frameshard/owner_route.h>
#include <frameshard/tower.h>

#include "testing/tensors.h"
#include "testing/test_tower.h"
#include "testing/token_owners.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace testing {

using MeshGrid = std::vector<GridThw>;

/// Outputs of the mesh tests' towers (all three test tower outputs, so
/// every parameter gets a gradient).
constexpr size_t kMeshTowerOutputs = 3;
inline const char* const kTestTowerParamNames[] = {
    "w1", "b1", "pos", "w2", "w3"};

/// See the banner. `outputs` in 1..3, like test_tower.
inline std::vector<at::Tensor> frame_context_tower(
    const TestTowerParams& p, const TowerInput& in, int outputs) {
  const int64_t rows = in.pixel_values.size(0);
  const at::Tensor cu = in.cu_seqlens.cpu().to(at::kLong);
  const at::Tensor grid = in.grid_thw.cpu();
  std::vector<int64_t> frame_rows;
  for (int64_t g = 0; g < grid.size(0); ++g) {
    for (int64_t t = 0; t < grid[g][0].item<int64_t>(); ++t) {
      frame_rows.push_back(
          grid[g][1].item<int64_t>() * grid[g][2].item<int64_t>());
    }
  }
  const auto frames = static_cast<int64_t>(frame_rows.size());
  TORCH_CHECK(cu.numel() == frames + 1, "frame_context_tower: cu_seqlens");
  std::vector<int64_t> piece_of(static_cast<size_t>(frames), -1);
  for (size_t k = 0; k < in.pieces.size(); ++k) {
    piece_of[static_cast<size_t>(in.pieces[k].frame)] = static_cast<int64_t>(k);
  }
  std::vector<double> pos(static_cast<size_t>(rows), 0.0);
  for (int64_t f = 0; f < frames; ++f) {
    const int64_t a = cu[f].item<int64_t>();
    const int64_t b = cu[f + 1].item<int64_t>();
    const int64_t k = piece_of[static_cast<size_t>(f)];
    const FramePiece* piece = k < 0 ? nullptr : &in.pieces[k];
    TORCH_CHECK(
        b - a == (piece ? piece->rows() : frame_rows[f]),
        "frame_context_tower: frame size mismatch");
    const int64_t offset = piece ? piece->begin : 0;
    for (int64_t j = a; j < b; ++j) {
      pos[static_cast<size_t>(j)] =
          static_cast<double>(offset + j - a) / frame_rows[f];
    }
  }
  const auto dtype = in.pixel_values.scalar_type();
  const at::Tensor pos_col =
      at::tensor(pos, at::kDouble).to(dtype).reshape({rows, 1});
  at::Tensor h =
      at::tanh(at::matmul(in.pixel_values, p.w1) + p.b1 + pos_col * p.pos);
  std::vector<at::Tensor> whole;
  if (in.exchange) {
    // Every rank of a split plan calls it, with pieces or without.
    std::vector<at::Tensor> ex = in.exchange(h);
    h = ex[0];
    whole.assign(ex.begin() + 1, ex.end());
  }
  std::vector<at::Tensor> context;
  for (int64_t f = 0; f < frames; ++f) {
    const int64_t a = cu[f].item<int64_t>();
    const int64_t n = cu[f + 1].item<int64_t>() - a;
    const int64_t k = piece_of[static_cast<size_t>(f)];
    const at::Tensor mean =
        k < 0 ? h.narrow(0, a, n).mean(0) : whole.at(k).mean(0);
    context.push_back(mean.expand({n, kTestHidden1}));
  }
  if (!context.empty()) {
    h = h + 0.5 * at::cat(context, 0);
  }
  return test_tower_heads(p, h, outputs);
}

struct MeshProblem {
  int64_t cp = 1;
  std::vector<MeshGrid> replicas;
  std::vector<at::Tensor> pixels;            // [replica]
  std::vector<std::vector<int64_t>> owners;  // [replica]: empty, or per token
  /// [mesh rank][output]: [its replica's tokens, hidden_i].
  std::vector<std::vector<at::Tensor>> weights;
  TestTowerParams params;
  bool frame_context = false;

  VisionTower tower(const TestTowerParams& p) const {
    const bool context = frame_context;
    return [p, context](const TowerInput& in) {
      const int n = static_cast<int>(kMeshTowerOutputs);
      return context ? frame_context_tower(p, in, n) : test_tower(p, in, n);
    };
  }

  /// The replica-local rows mesh rank `rank` receives.
  std::vector<int64_t> rows_of(int64_t rank) const {
    const auto q = static_cast<size_t>(rank / cp);
    if (!owners[q].empty()) {
      return tokens_owned_by(owners[q], rank % cp);
    }
    std::vector<int64_t> all;
    for (int64_t t = 0; t < weights[rank][0].size(0); ++t) {
      all.push_back(t);
    }
    return all;
  }

  /// Rank `rank`'s loss of the rows it received (undefined if none came).
  at::Tensor loss_of(int64_t rank, const std::vector<at::Tensor>& out) const {
    if (out.empty()) {
      return at::Tensor();
    }
    const at::Tensor rows = at::tensor(rows_of(rank), at::kLong);
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (size_t i = 0; i < out.size(); ++i) {
      const at::Tensor w = weights[rank][i].index_select(0, rows);
      loss = loss + (out[i] * w).sum() + 0.25 * (out[i] * out[i] * w).sum();
    }
    return loss;
  }
};

/// Draws the problem from torch's generator (seed it first).
inline MeshProblem make_mesh_problem(
    const std::vector<MeshGrid>& replicas,
    int64_t cp,
    const MediaLayout& layout,
    bool owners,
    bool frame_context) {
  MeshProblem p;
  p.cp = cp;
  p.replicas = replicas;
  p.frame_context = frame_context;
  p.params = random_test_tower_params(at::kDouble);
  const int64_t widths[] = {kTestHidden1, kTestHidden2, kTestHidden3};
  for (const MeshGrid& g : replicas) {
    const int64_t tokens = expand_frames(g, layout).total_tokens;
    p.pixels.push_back(at::randn({patch_rows(g), kTestFeatures}, at::kDouble));
    p.owners.push_back(
        owners ? spread_token_owners(
                     tokens, static_cast<int>(cp), SequenceSplit::kLoadBalanced)
               : std::vector<int64_t>{});
    for (int64_t k = 0; k < cp; ++k) {
      std::vector<at::Tensor> w;
      for (size_t i = 0; i < kMeshTowerOutputs; ++i) {
        w.push_back(at::randn({tokens, widths[i]}, at::kDouble));
      }
      p.weights.push_back(std::move(w));
    }
  }
  return p;
}

struct MeshReference {
  /// [mesh rank][output]: the rows it must receive (none: text-only).
  std::vector<std::vector<at::Tensor>> rank_outputs;
  std::vector<std::vector<int64_t>> rank_tokens;  // with owners
  /// (1/dp) sum over replicas q and cp ranks k of dL_{q,k}/dparams.
  std::vector<at::Tensor> grads;
};

inline MeshReference mesh_reference(const MeshProblem& p, int64_t dp) {
  MeshReference ref;
  const TestTowerParams leaves = leaf_copy(p.params, true);
  const VisionTower tower = p.tower(leaves);
  at::Tensor total = at::zeros({}, at::kDouble);
  for (int64_t q = 0; q < dp; ++q) {
    const MeshGrid& g = p.replicas[static_cast<size_t>(q)];
    std::vector<at::Tensor> outs;
    if (!g.empty()) {
      outs = tower(whole_frames_input(p.pixels[static_cast<size_t>(q)], g));
    }
    for (int64_t k = 0; k < p.cp; ++k) {
      const int64_t m = q * p.cp + k;
      const std::vector<int64_t> rows = p.rows_of(m);
      std::vector<at::Tensor> mine;
      for (const at::Tensor& o : outs) {
        mine.push_back(o.index_select(0, at::tensor(rows, at::kLong)));
      }
      if (!mine.empty()) {
        total = total + p.loss_of(m, mine);
      }
      std::vector<at::Tensor> detached;
      for (const at::Tensor& o : mine) {
        detached.push_back(o.detach());
      }
      ref.rank_outputs.push_back(std::move(detached));
      ref.rank_tokens.push_back(
          p.owners[q].empty() ? std::vector<int64_t>{} : rows);
    }
  }
  if (total.requires_grad()) {
    total.backward();
  }
  for (const at::Tensor& t : leaves.list()) {
    ref.grads.push_back(
        (t.grad().defined() ? t.grad() : at::zeros_like(t)) / dp);
  }
  return ref;
}

}  // namespace testing
}  // namespace frameshard
