// `frameshard train` and `frameshard ab`: context-parallel training of a
// small VLM with frame sharding as the recipe says (train), or twice, with
// vision replicated and sharded, compared (ab).
//
// Where the ranks come from:
//   * a launcher's environment (torchrun --no-python, srun, mpirun: RANK or
//     SLURM_PROCID or OMPI_COMM_WORLD_RANK ... set): this process is one
//     rank (TCPStore at MASTER_ADDR:MASTER_PORT);
//   * otherwise the command spawns --nproc-per-node local ranks (default
//     dp_size x cp_size) of itself in a hidden worker mode
//     (`train --worker-rank r --store-path DIR/store --recipe DIR/r.yaml`)
//     that rendezvous through a FileStore (tools/rank_processes.h).
// The parent resolves the recipe (file or embedded default, dotted
// overrides, --steps) once and hands every worker the same YAML.
#include "commands.h"
#include "dotted_overrides.h"
#include "rank_processes.h"
#include "train_launch.h"

#include <frameshard/cost.h>
#include <frameshard/error.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/train/train_config.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

struct TrainArgs {
  std::string recipe;  // positional CONFIG.yaml ("" = embedded default)
  int64_t steps = -1;
  bool json = false;
  int nproc_per_node = 0;  // 0: dp_size x cp_size
  std::string plot = "frameshard_ab.svg";
  std::string backend = "auto";
  std::string model_dir;  // --model-dir: model.model_dir
  bool print_config = false;
  std::string write_cost;  // --write-cost FILE (cost_alpha online)
  // Hidden worker mode.
  int worker_rank = -1;
  int worker_world = 0;
  std::string store_path;
};

train::TrainConfig resolve_recipe(
    const TrainArgs& a,
    const std::vector<std::string>& extras,
    const char* command) {
  train::TrainConfig cfg = a.recipe.empty()
                               ? train::default_train_config()
                               : train::load_train_config(a.recipe);
  apply_dotted_overrides(
      extras,
      [&cfg](const std::string& k, const std::string& v) {
        train::apply_train_override(cfg, k, v);
      },
      command,
      "distributed.multimodal.vision.frame_sharding.enabled false");
  if (!a.model_dir.empty()) {
    train::apply_train_override(cfg, "model.model_dir", a.model_dir);
  }
  if (a.steps >= 0) {
    FRAMESHARD_CHECK(
        a.steps >= 1, command, "expected --steps >= 1, got ", a.steps);
    train::apply_train_override(cfg, "train.steps", std::to_string(a.steps));
  }
  // Spawned ranks read this recipe from a temporary directory, against which
  // a relative manifest or model_dir (a relative recipe's, or an override's)
  // would resolve: pin them to this working directory.
  for (std::string* p : {&cfg.data.manifest, &cfg.model.model_dir}) {
    if (!p->empty()) {
      *p = std::filesystem::absolute(*p).lexically_normal().string();
    }
  }
  return cfg;
}

// --write-cost writes the online model's fit: only cost_alpha online has one.
void check_write_cost(
    const TrainArgs& a, const train::TrainConfig& cfg, const char* command) {
  const std::string& alpha = cfg.parallel.frame_sharding.cost_alpha;
  FRAMESHARD_CHECK(
      a.write_cost.empty() || alpha == kOnlineCost,
      command,
      "expected distributed.multimodal.vision.frame_sharding.cost_alpha ",
      kOnlineCost,
      " with --write-cost, got ",
      alpha);
}

std::vector<std::string> worker_args(
    const TrainArgs& a, const std::string& recipe_path, int world) {
  std::vector<std::string> v{
      recipe_path,
      "--worker-world",
      std::to_string(world),
      "--backend",
      a.backend};
  if (a.json) {
    v.push_back("--json");
  }
  v.push_back("--plot");
  v.push_back(a.plot);
  if (!a.write_cost.empty()) {
    v.push_back("--write-cost");
    v.push_back(a.write_cost);
  }
  return v;
}

int run_command(
    const TrainArgs& a, const std::vector<std::string>& extras, bool ab) {
  const char* command = ab ? "ab" : "train";
  TrainRun run;
  run.ab = ab;
  run.json = a.json;
  run.plot = ab ? a.plot : "";
  run.backend = a.backend;
  run.write_cost = a.write_cost;
  if (a.worker_rank >= 0) {  // a spawned local rank: the recipe is resolved
    run.config = train::load_train_config(a.recipe);
    run.local_world = a.worker_world;
    return run_worker_guarded(command, a.worker_rank, [&] {
      return run_train_rank(run, a.store_path, a.worker_rank, a.worker_world);
    });
  }
  run.config = resolve_recipe(a, extras, command);
  check_write_cost(a, run.config, command);
  if (a.print_config) {
    std::cout << train::to_yaml(run.config);
    return 0;
  }
  const int world = static_cast<int>(
      run.config.parallel.dp_size * run.config.parallel.cp_size);
  if (launcher_env_present() && a.nproc_per_node == 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    run.local_world = local ? std::max(1, std::atoi(local)) : 1;
    return run_train_rank(run, "", 0, 0);
  }
  const int nproc = a.nproc_per_node > 0 ? a.nproc_per_node : world;
  FRAMESHARD_CHECK(
      nproc == world,
      command,
      "expected --nproc-per-node to equal distributed.dp_size x cp_size = ",
      world,
      " on one node (several nodes: launch with torchrun, srun or mpirun), "
      "got ",
      nproc);
  check_rank_options(command, nproc, run.config.train.timeout_ms);
  TempDir dir(command);
  const std::string recipe_path = dir.path() + "/recipe.yaml";
  {
    std::ofstream f(recipe_path);
    f << train::to_yaml(run.config);
    FRAMESHARD_CHECK(f.good(), command, "expected to write ", recipe_path);
  }
  RankLaunch launch;
  launch.command = command;
  launch.nproc = nproc;
  launch.store_path = dir.path() + "/store";
  launch.worker_args = worker_args(a, recipe_path, nproc);
  launch.timeout = std::chrono::milliseconds(run.config.train.timeout_ms);
  launch.max_result_code = 1;  // ab: the arms' losses differ
  return run_rank_processes(launch);
}

void add_options(CLI::App* cmd, TrainArgs& a, bool ab) {
  cmd->add_option("--steps", a.steps, "Training steps (overrides train.steps)");
  cmd->add_flag("--json", a.json, "Print one JSON object (rank 0)");
  cmd->add_option(
      "--nproc-per-node",
      a.nproc_per_node,
      "Local rank processes to spawn (default dp_size x cp_size)");
  cmd->add_option("--backend", a.backend, "Process groups: gloo, nccl or auto")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}))
      ->capture_default_str();
  cmd->add_flag(
      "--print-config", a.print_config, "Print the resolved recipe and exit");
  cmd->add_option(
      "--write-cost",
      a.write_cost,
      "With cost_alpha online: write the fit in force at the end as a "
      "calibration file (a next run's cost_alpha: FILE)");
  if (ab) {
    cmd->add_option(
           "--plot",
           a.plot,
           "SVG of both arms' losses and step times (\"\": none)")
        ->capture_default_str();
  }
  cmd->add_option("--worker-rank", a.worker_rank)->group("");
  cmd->add_option("--worker-world", a.worker_world)->group("");
  cmd->add_option("--store-path", a.store_path)->group("");
  cmd->allow_extras();
  cmd->footer(
      "RECIPE (first argument, optional): a recipe YAML; default the "
      "embedded default recipe (--print-config shows it; examples/recipes/ "
      "has more). Dotted overrides set any recipe key, e.g. --train.steps 6 "
      "--model.vision_checkpointing true "
      "--distributed.multimodal.vision.frame_sharding.enabled false "
      "--model.vision_dp_over_cp true. Under torchrun --no-python (or srun, "
      "mpirun) each process is one rank; otherwise the command spawns the "
      "local ranks itself.");
}

void register_one(CLI::App& app, bool ab) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      ab ? "ab" : "train",
      ab ? "Train twice with the same seed, batch and topology, vision "
           "replicated and sharded; compare step time, vision time, peak "
           "bytes and losses"
         : "Context-parallel training of a small VLM (frame sharding as the "
           "recipe says)");
  add_options(cmd, *args, ab);
  cmd->callback([args, cmd, ab] {
    // The recipe is the first argument when it is not an option. It is not
    // a CLI11 positional: that would swallow the value of a dotted override
    // (`--data.scale 12`), which CLI11 cannot know takes one.
    std::vector<std::string> extras = cmd->remaining();
    if (!extras.empty() && extras.front().rfind("-", 0) != 0) {
      args->recipe = extras.front();
      extras.erase(extras.begin());
    }
    const int code = run_command(*args, extras, ab);
    if (code != 0) {
      throw CLI::RuntimeError(code);
    }
  });
}

}  // namespace

void register_train_commands(CLI::App& app) {
  register_one(app, false);
  register_one(app, true);
}

}  // namespace cli
}  // namespace frameshard
