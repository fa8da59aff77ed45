// The tests' tiny functional tower (see test_tower.h).

#include "testing/test_tower.h"

#include <c10/util/Exception.h>

namespace frameshard {
namespace testing {

TestTowerParams random_test_tower_params(at::ScalarType dtype) {
  auto r = [&](std::vector<int64_t> s) {
    return (at::randn(s, at::kDouble) * 0.5).to(dtype);
  };
  return {
      r({kTestFeatures, kTestHidden1}),
      r({kTestHidden1}),
      r({kTestHidden1}),
      r({kTestHidden1, kTestHidden2}),
      r({kTestHidden1, kTestHidden3})};
}

TestTowerParams leaf_copy(const TestTowerParams& p, bool requires_grad) {
  auto c = [&](const at::Tensor& t) {
    return t.detach().clone().requires_grad_(requires_grad);
  };
  return {c(p.w1), c(p.b1), c(p.pos), c(p.w2), c(p.w3)};
}

std::vector<at::Tensor> test_tower(
    const TestTowerParams& p, const TowerInput& in, int outputs) {
  const int64_t rows = in.pixel_values.size(0);
  TORCH_CHECK(in.cu_seqlens.scalar_type() == at::kInt, "test tower: cu int32");
  TORCH_CHECK(in.grid_thw.scalar_type() == at::kLong, "test tower: grid int64");
  at::Tensor cu = in.cu_seqlens.cpu();
  at::Tensor grid = in.grid_thw.cpu();
  std::vector<int64_t> frame_rows;
  for (int64_t g = 0; g < grid.size(0); ++g) {
    for (int64_t t = 0; t < grid[g][0].item<int64_t>(); ++t) {
      frame_rows.push_back(
          grid[g][1].item<int64_t>() * grid[g][2].item<int64_t>());
    }
  }
  TORCH_CHECK(
      cu.numel() == static_cast<int64_t>(frame_rows.size()) + 1,
      "test tower: cu_seqlens has one entry per frame plus one");
  TORCH_CHECK(cu[0].item<int>() == 0, "test tower: cu_seqlens[0] == 0");
  std::vector<double> pos(static_cast<size_t>(rows), 0.0);
  for (size_t f = 0; f < frame_rows.size(); ++f) {
    const int64_t a = cu[f].item<int>();
    const int64_t b = cu[f + 1].item<int>();
    TORCH_CHECK(b - a == frame_rows[f], "test tower: frame size mismatch");
    for (int64_t j = a; j < b; ++j) {
      pos[static_cast<size_t>(j)] = static_cast<double>(j - a) / (b - a);
    }
  }
  TORCH_CHECK(cu[-1].item<int>() == rows, "test tower: cu_seqlens[-1] == rows");
  const auto dtype = in.pixel_values.scalar_type();
  at::Tensor pos_col =
      at::tensor(pos, at::kDouble).to(dtype).reshape({rows, 1});
  at::Tensor h =
      at::tanh(at::matmul(in.pixel_values, p.w1) + p.b1 + pos_col * p.pos);
  return test_tower_heads(p, h, outputs);
}

std::vector<at::Tensor> test_tower_heads(
    const TestTowerParams& p, const at::Tensor& h, int outputs) {
  const int64_t rows = h.size(0);
  at::Tensor merged = h.reshape({rows / (kTestMerge * kTestMerge),
                                 kTestMerge * kTestMerge,
                                 kTestHidden1})
                          .mean(1);
  std::vector<at::Tensor> outs{merged};
  if (outputs >= 2) {
    outs.push_back(at::matmul(merged, p.w2));
  }
  if (outputs >= 3) {
    outs.push_back(at::tanh(at::matmul(merged, p.w3)));
  }
  return outs;
}

parity::TowerFactory test_tower_factory(int outputs) {
  return [outputs](at::ScalarType dtype) {
    const TestTowerParams p = leaf_copy(random_test_tower_params(dtype), true);
    parity::TowerInstance t;
    t.forward = [p, outputs](const TowerInput& in) {
      return test_tower(p, in, outputs);
    };
    t.names = {"w1", "b1", "pos", "w2", "w3"};
    t.parameters = p.list();
    return t;
  };
}

}  // namespace testing
}  // namespace frameshard
