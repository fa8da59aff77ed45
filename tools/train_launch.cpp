// Groups of one training rank and the arms run on them (train_launch.h).
#include "train_launch.h"

#include "online_report.h"

#include <frameshard/error.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/train/ab_plot.h>
#include <frameshard/train/memory_stats.h>
#include <frameshard/train/trainer.h>

#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

namespace frameshard {
namespace cli {
namespace {

// A rank's groups: the world over the store, the CP group (the world when
// dp == 1, else a Gloo subgroup of the same store).
train::TrainGroups make_groups(
    const train::TrainConfig& cfg,
    const StorePtr& store,
    int rank,
    int world,
    int local_rank,
    const std::string& backend) {
  GroupOptions go;
  go.timeout = std::chrono::milliseconds(cfg.train.timeout_ms);
  go.threads = 1;
  train::TrainGroups g;
  std::string b = backend;
  if (b == "auto") {
    b = nccl_compiled() && torch::cuda::is_available() ? "nccl" : "gloo";
  }
  if (b == "nccl") {
#ifdef FRAMESHARD_WITH_NCCL
    FRAMESHARD_CHECK(
        cfg.parallel.dp_size == 1,
        "train",
        "expected distributed.dp_size 1 with NCCL (CP subgroups are Gloo-only "
        "for now), got ",
        cfg.parallel.dp_size);
    g.device = c10::Device(
        c10::kCUDA,
        static_cast<c10::DeviceIndex>(
            local_rank % torch::cuda::device_count()));
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    guard.setDevice(g.device);
    g.world = make_nccl_group(store, rank, world, go);
#else
    FRAMESHARD_CHECK(
        false,
        "train",
        "expected --backend gloo (this build has no NCCL), got nccl");
#endif
  } else {
    g.world = make_gloo_group(store, rank, world, go);
  }
  if (cfg.parallel.dp_size == 1) {
    g.cp = g.world;
  } else {
    const MeshShape shape{cfg.parallel.dp_size, cfg.parallel.cp_size, 1};
    g.cp = make_subgroup(
        store, rank, mesh_group_ranks(shape, {"cp"}, rank), "cp", go);
  }
  return g;
}

// Runs the steps of one arm; rank 0 prints a progress line per step.
ArmRecord run_arm(
    const TrainRun& run,
    const train::TrainGroups& g,
    const std::string& name,
    const train::TrainConfig& cfg,
    bool sharded) {
  train::Trainer trainer(cfg, g, sharded);
  ArmRecord rec;
  rec.name = name;
  rec.cp = cfg.parallel.cp_size;
  rec.dedup = sharded && cfg.parallel.frame_sharding.dedup;  // trainer.h
  const bool printer = g.world->getRank() == 0 && !run.json;
  for (int64_t s = 0; s < cfg.train.steps; ++s) {
    const train::StepMetrics m = trainer.step(s);
    rec.steps.push_back(train::gather_step_metrics(m, g));
    if (printer) {
      std::cout
          << progress_line(
                 name, rec.steps.back(), cfg.train.steps, rec.dedup, rec.cp)
          << std::endl;
    }
  }
  if (trainer.online_cost() != nullptr) {
    rec.online = *trainer.online_cost();
  }
  return rec;
}

// AReaL's rank-local dedup: a recipe that asks for dedup with frame
// sharding off (enabled: false, dedup: true). Each rank encodes the
// distinct frames of its own batch, nothing shared across ranks.
bool rank_local_dedup(const train::TrainConfig& cfg) {
  const auto& fs = cfg.parallel.frame_sharding;
  return fs.dedup && !fs.enabled && !cfg.model.vision_dp_over_cp;
}

// The second arm of an A/B: sharding on (the recipe's rule, or Megatron's
// when model.vision_dp_over_cp is set), with the recipe's dedup; or, for
// rank-local dedup, the recipe as it is (sharding stays off), so ab
// compares AReaL's scheme with the replicated baseline.
train::TrainConfig sharded_recipe(train::TrainConfig cfg) {
  if (!cfg.model.vision_dp_over_cp && !rank_local_dedup(cfg)) {
    cfg.parallel.frame_sharding.enabled = true;
  }
  return cfg;
}

double loss_tolerance(const train::TrainConfig& cfg) {
  return cfg.train.dtype == "float64"   ? 1e-9
         : cfg.train.dtype == "float32" ? 1e-5
                                        : 1e-2;
}

int report_ab(const TrainRun& run, const ArmRecord& rep, const ArmRecord& sh) {
  if (!run.plot.empty()) {
    std::ofstream f(run.plot);
    f << train::ab_plot_svg(
        {plot_series(rep), plot_series(sh)},
        "frameshard ab: replicated vs " + sh.name + " vision");
    FRAMESHARD_CHECK(f.good(), "ab", "expected to write --plot ", run.plot);
  }
  if (run.json) {
    std::cout << ab_json(rep, sh).dump(2) << std::endl;
  } else {
    print_ab_summary(std::cout, rep, sh);
    if (!run.plot.empty()) {
      std::cout << "  plot: " << run.plot << "\n";
    }
  }
  const double diff = loss_max_abs_diff(rep, sh);
  if (diff > loss_tolerance(run.config)) {
    std::cerr << "ab: the arms' losses differ by " << diff << " > "
              << loss_tolerance(run.config) << " (" << run.config.train.dtype
              << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace

int run_train_rank(
    const TrainRun& run, const std::string& store_path, int rank, int world) {
  train::install_counting_cpu_allocator();
  // The local ranks share the cores.
  const int cores =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / std::max(1, run.local_world)));
  StorePtr store;
  int local_rank = rank;
  if (!store_path.empty()) {
    store = c10::make_intrusive<c10d::FileStore>(store_path, world);
    store->setTimeout(std::chrono::milliseconds(run.config.train.timeout_ms));
  } else {
    const LaunchEnv env = read_launch_env();
    rank = env.rank;
    world = env.world_size;
    local_rank = env.local_rank;
    store = make_store_from_env(
        env, std::chrono::milliseconds(run.config.train.timeout_ms));
  }
  const train::TrainGroups g =
      make_groups(run.config, store, rank, world, local_rank, run.backend);
  const bool rank0 = g.world->getRank() == 0;
  if (!run.ab) {
    const ArmRecord rec = run_arm(run, g, "train", run.config, true);
    if (rank0) {
      if (run.json) {
        std::cout << arm_json(rec).dump(2) << std::endl;
      } else {
        print_train_summary(std::cout, rec);
      }
      if (!run.write_cost.empty()) {
        write_cost_file(run.write_cost, rec);
      }
    }
    return 0;
  }
  const ArmRecord rep = run_arm(run, g, "replicated", run.config, false);
  const ArmRecord sh = run_arm(
      run,
      g,
      rank_local_dedup(run.config) ? "rank-local" : "sharded",
      sharded_recipe(run.config),
      true);
  if (!rank0) {
    return 0;
  }
  const int code = report_ab(run, rep, sh);
  if (!run.write_cost.empty()) {
    write_cost_file(run.write_cost, sh);
  }
  return code;
}

}  // namespace cli
}  // namespace frameshard
