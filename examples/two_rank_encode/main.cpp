// two_rank_encode: two context-parallel ranks (threads of this process, Gloo
// on loopback) encode a small batch of images and videos with frameshard's
// toy Qwen-style tower. Each rank runs the tower on its own frames only;
// frameshard::encode gathers the outputs back in the original order. The
// program prints the plan and the largest difference from running the tower
// on every frame at once (exit 0 when it is <= 1e-12 in float64).
#include <frameshard/frameshard.h>
#include <frameshard/models/toy_tower.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

int main() {
  at::set_num_threads(1);
  const int world = 2;
  // grid_thw rows (t, h, w) in patches: an image, a 4-unit video, an image,
  // a 3-unit video (h and w multiples of the 2x2 merge).
  const std::vector<frameshard::GridThw> grid{
      {1, 8, 12}, {4, 4, 4}, {1, 4, 8}, {3, 6, 4}};

  torch::manual_seed(0);
  frameshard::models::ToyTower tower(frameshard::models::ToyTowerOptions{});
  tower->to(torch::kDouble);
  int64_t rows = 0;
  std::vector<int64_t> flat;
  for (const auto& g : grid) {
    rows += g.patches();
    flat.insert(flat.end(), {g.t, g.h, g.w});
  }
  const at::Tensor pixels =
      torch::randn({rows, tower->options().in_features()}, torch::kDouble);
  const at::Tensor grid_thw =
      torch::tensor(flat).view({static_cast<int64_t>(grid.size()), 3});

  // Both ranks rendezvous through one in-memory store. Separate processes
  // would use frameshard::make_file_store_group or make_group_from_env.
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<frameshard::EncodeResult> results(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        torch::NoGradGuard no_grad;  // inference only: the tower is shared
        auto pg = frameshard::make_gloo_group(store, rank, world);
        frameshard::EncodeOptions options;
        options.plan.world = world;  // cp_size == the group's size
        options.plan.policy.enabled = true;
        options.plan.policy.min_tokens = 0;  // shard even this tiny batch
        options.plan.policy.min_frames = 0;
        results[rank] = frameshard::encode(
            frameshard::models::as_vision_tower(tower),
            pixels,
            grid_thw,
            pg,
            options);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  for (int rank = 0; rank < world; ++rank) {
    if (!errors[rank].empty()) {
      std::fprintf(stderr, "rank %d failed: %s\n", rank, errors[rank].c_str());
      return 2;
    }
  }

  const frameshard::ShardPlan& plan = results[0].plan;
  std::printf(
      "plan: %s (%s), %zu frame units, fingerprint %016llx\n",
      frameshard::to_string(plan.path).c_str(),
      plan.reason.c_str(),
      plan.frames.units.size(),
      static_cast<unsigned long long>(plan.fingerprint));
  for (const auto& r : plan.ranks) {
    std::printf(
        "  rank %lld: %zu units, %lld patch rows, %lld tokens, %lld bytes "
        "sent\n",
        static_cast<long long>(r.rank),
        r.units.size(),
        static_cast<long long>(r.real_patch_rows),
        static_cast<long long>(r.real_tokens),
        static_cast<long long>(results[r.rank].bytes_sent));
  }

  // The replicated reference: the tower on every frame at once.
  torch::NoGradGuard no_grad;
  frameshard::TowerInput full{
      pixels, grid_thw, frameshard::frame_cu_seqlens(grid)};
  const auto reference = tower->forward(full);
  double worst = 0.0;
  for (int rank = 0; rank < world; ++rank) {
    for (size_t k = 0; k < reference.size(); ++k) {
      worst = std::max(
          worst,
          (results[rank].outputs[k] - reference[k]).abs().max().item<double>());
    }
  }
  std::printf(
      "outputs: embeddings [%lld, %lld], deepstack [%lld, %lld]\n",
      static_cast<long long>(reference[0].size(0)),
      static_cast<long long>(reference[0].size(1)),
      static_cast<long long>(reference[1].size(0)),
      static_cast<long long>(reference[1].size(1)));
  std::printf("max abs diff vs replicated: %.3e\n", worst);
  const bool ok = worst <= 1e-12;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
