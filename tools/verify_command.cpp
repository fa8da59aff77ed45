// `frameshard verify`: sharded vs replicated parity of a random Qwen-style
// tower over N local rank processes.
//
// The parent validates every option, resolves (and if needed scales down)
// the workload (verify_workload.h), writes it to a fresh temporary directory
// and starts N copies of this binary (fork + exec of /proc/self/exe) in a
// hidden worker mode (`verify --worker-rank r --store-path DIR/store ...`).
// The workers rendezvous through a c10d::FileStore in that directory and run
// the parity harness (src/parity/parity.h) on the same ToyTower, pixels and
// per-rank loss weights (same seed on every rank): frameshard::encode, always
// on the sharded path (the policy is forced on with zero thresholds), each
// rank back-propagating ITS loss (rows i % N == r with rank-specific
// weights), gradients summed over ranks, compared on rank 0 with the
// replicated reference (and, for bfloat16, a float64 exact run). Rank 0
// prints the report (verify_report.h, which also has the tolerances). Exit
// codes: 0 pass, 1 a difference above the tolerance, 2 an error (bad option,
// a rank failed or was killed).
//
// The hidden --inject-fault loss|exit exists for the tests (a FAIL and a
// dying rank must be reported, never hang).

#include "commands.h"
#include "dotted_overrides.h"
#include "dtype_option.h"
#include "option_checks.h"
#include "parity/parity.h"
#include "rank_processes.h"
#include "runtime/fault.h"
#include "shard_options.h"
#include "verify_report.h"
#include "verify_towers.h"
#include "verify_workload.h"

#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/models/toy_tower.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/process_group.h>
#include <frameshard/workload.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

struct VerifyArgs {
  int nproc = 2;
  WorkloadRequest workload;  // --workload, --preset, --seed, --scale, ...
  std::string dtype = "float32";
  std::string partitioner;  // empty: from --config, else optimal
  std::string config_file;
  std::vector<std::string> overrides;  // dotted config overrides
  std::string tower = "toy";           // verify_towers.h
  int64_t min_local_patch_rows = -1;   // -1: from --config, else 96
  bool json = false;
  int64_t timeout_ms = 60000;
  // Hidden worker mode.
  int worker_rank = -1;
  std::string store_path;
  std::string workload_label;
  // Testing only (hidden): "loss" scales the last rank's loss by 1 + 1e-3
  // (gradients must then FAIL), "exit" ends the last rank right after the
  // rendezvous (the others must error out, not hang).
  std::string inject_fault = "none";
};

at::ScalarType parse_verify_dtype(const std::string& name) {
  return parse_dtype_option(
      name, "verify", {at::kDouble, at::kFloat, at::kBFloat16});
}

PlanOptions verify_plan_options(const VerifyArgs& a, const Workload& wl) {
  PlanOptions o =
      plan_options(command_config(a.config_file, a.overrides, "verify"));
  o.layout = wl.layout;
  // verify always exercises the sharded path (unless --nproc 1).
  apply_shard_options(o, a.nproc, a.partitioner, a.min_local_patch_rows);
  return o;
}

// ------------------------------------------------------------- worker

parity::ParitySpec verify_spec(const VerifyArgs& a, const Workload& wl) {
  parity::ParitySpec spec;
  spec.grid = wl.grid;
  const VerifyTower tower = verify_tower(a.tower, wl.layout);
  spec.plan = verify_plan_options(a, wl);
  spec.plan.split.window_side = tower.window_side;
  spec.dtype = parse_verify_dtype(a.dtype);
  spec.in_features = tower.in_features;
  spec.seed = a.workload.seed;
  spec.normalize_weights = true;
  spec.exact_reference = spec.dtype == at::kBFloat16;
  spec.slice_only_control = false;  // not reported; one backward less
  spec.timeout = std::chrono::milliseconds(a.timeout_ms);
  spec.output_names = tower.output_names;
  return spec;
}

// FRAMESHARD_FAULT=<rank>:input:<grid|dtype|config|world> (runtime/fault.h):
// this rank's inputs made to differ from its peers', as a rank given another
// data shard, config or launch line would; every rank must then raise the
// same clear error (the consensus, or the group-size check), none hang.
void apply_input_faults(int rank, parity::ParitySpec& spec, int& world) {
  using internal::fault_wanted;
  if (fault_wanted("input", "grid", rank)) {
    spec.grid.back().t += 1;
  }
  if (fault_wanted("input", "dtype", rank)) {
    spec.dtype = spec.dtype == at::kDouble ? at::kFloat : at::kDouble;
  }
  if (fault_wanted("input", "config", rank)) {
    spec.plan.partitioner = spec.plan.partitioner == Partitioner::kOptimal
                                ? Partitioner::kLpt
                                : Partitioner::kOptimal;
  }
  if (fault_wanted("input", "world", rank)) {
    world += 1;
  }
}

int run_worker(const VerifyArgs& a) {
  at::set_num_threads(1);
  const int rank = a.worker_rank;
  const Workload wl = load_workload(a.workload.file);
  parity::ParitySpec spec = verify_spec(a, wl);
  int world = a.nproc;
  apply_input_faults(rank, spec, world);
  // The harness seeds torch before each instance: same tower on every rank.
  const parity::ParitySetup setup =
      parity::prepare(spec, verify_tower(a.tower, wl.layout).factory, {rank});

  GroupOptions go;
  go.timeout = std::chrono::milliseconds(a.timeout_ms);
  go.threads = 1;
  ProcessGroupPtr pg = make_file_store_group(a.store_path, rank, world, go);
  const bool faulty_rank = rank == a.nproc - 1;
  if (faulty_rank && a.inject_fault == "exit") {
    std::fprintf(stderr, "verify: rank %d exits (--inject-fault exit)\n", rank);
    std::fflush(stderr);
    std::_Exit(3);
  }
  parity::RankOptions ro;
  if (faulty_rank && a.inject_fault == "loss") {
    ro.loss_scale = 1.0 + 1e-3;
  }
  const parity::RankParity mine = parity::run_rank(setup, rank, pg, ro);
  if (!mine.report) {
    return 0;  // rank 0 reports
  }
  VerifyReportContext ctx;
  ctx.nproc = a.nproc;
  ctx.dtype_name = a.dtype;
  ctx.seed = a.workload.seed;
  ctx.workload_label = a.workload_label;
  ctx.workload = wl;
  ctx.json = a.json;
  return print_verify_report(ctx, setup.problem, *mine.report);
}

// ------------------------------------------------------------- parent

// The options of every worker (the launcher adds --worker-rank and
// --store-path).
std::vector<std::string> worker_args(
    const VerifyArgs& a, const std::string& dir, const std::string& label) {
  std::vector<std::string> v{
      "--workload",
      dir + "/workload.json",
      "--workload-label",
      label,
      "--scale",
      "1",
      "--nproc",
      std::to_string(a.nproc),
      "--seed",
      std::to_string(a.workload.seed),
      "--dtype",
      a.dtype,
      "--timeout-ms",
      std::to_string(a.timeout_ms)};
  if (!a.partitioner.empty()) {
    v.insert(v.end(), {"--partitioner", a.partitioner});
  }
  if (!a.config_file.empty()) {
    v.insert(
        v.end(),
        {"--config", std::filesystem::absolute(a.config_file).string()});
  }
  if (a.min_local_patch_rows >= 0) {
    v.insert(
        v.end(),
        {"--min-local-patch-rows", std::to_string(a.min_local_patch_rows)});
  }
  if (a.json) {
    v.push_back("--json");
  }
  v.insert(v.end(), {"--tower", a.tower});
  v.insert(v.end(), a.overrides.begin(), a.overrides.end());
  if (a.inject_fault != "none") {
    v.insert(v.end(), {"--inject-fault", a.inject_fault});
  }
  return v;
}

int run_parent(const VerifyArgs& a) {
  check_rank_options("verify", a.nproc, a.timeout_ms);
  FRAMESHARD_CHECK(
      a.workload.max_frame_patches >= 0 && a.workload.max_patches >= 0,
      "verify",
      "expected --max-frame-patches and --max-patches >= 0, got ",
      a.workload.max_frame_patches,
      " and ",
      a.workload.max_patches);
  parse_verify_dtype(a.dtype);
  const ResolvedWorkload r = resolve_workload(a.workload);
  // Plan here too: a bad --config / --partitioner / workload is reported
  // once, before any process starts.
  make_plan(r.workload.grid, verify_plan_options(a, r.workload));

  TempDir dir("verify");
  {
    Workload wl = r.workload;
    wl.name = r.label;
    std::ofstream f(dir.path() + "/workload.json");
    f << to_json(wl);
    FRAMESHARD_CHECK(
        f.good(), "verify", "expected to write ", dir.path(), "/workload.json");
  }

  RankLaunch launch;
  launch.command = "verify";
  launch.nproc = a.nproc;
  launch.store_path = dir.path() + "/store";
  launch.worker_args = worker_args(a, dir.path(), r.display_label());
  launch.timeout = std::chrono::milliseconds(a.timeout_ms);
  launch.max_result_code = 1;  // a difference above tolerance
  return run_rank_processes(launch);
}

// ------------------------------------------------------------- options

constexpr const char* kFooter =
    "Tolerances: float64 max abs diff <= 1e-12, float32 <= 1e-5 "
    "(absolute, every output and parameter gradient). bfloat16, per "
    "tensor: ||sharded - replicated|| <= 3 x ||replicated - exact|| + "
    "2^-7 x ||exact|| (Frobenius; exact = float64 from the same bf16 "
    "values), because LibTorch's CPU bf16 reductions are themselves "
    "inexact; float64 is the strict check.\n"
    "Workloads are scaled down (h, w -> merge*ceil(h/merge/S)) so that the "
    "largest frame has <= --max-frame-patches and the total <= "
    "--max-patches patch rows, unless --scale is given; frame counts and "
    "order are kept.\n"
    "Exit codes: 0 pass, 1 a difference above tolerance, 2 an error.";

// What runs and on which workload.
void add_workload_options(CLI::App* cmd, VerifyArgs& args) {
  cmd->add_option("--nproc", args.nproc, "Rank processes to start")
      ->capture_default_str();
  auto* wl =
      cmd->add_option("--workload", args.workload.file, "Workload JSON file");
  auto* preset = cmd->add_option(
      "--preset",
      args.workload.preset,
      "Synthetic preset: doc | multi | video | mixed (default: a small "
      "built-in workload)");
  wl->excludes(preset);
  cmd->add_option(
         "--seed", args.workload.seed, "Seed of the tower, pixels, preset")
      ->capture_default_str();
  cmd->add_option("--dtype", args.dtype, "float64 | float32 | bfloat16")
      ->capture_default_str()
      ->check(CLI::IsMember({"float64", "float32", "bfloat16"}));
  cmd->add_option(
         "--partitioner",
         args.partitioner,
         "optimal | greedy | count | lpt (default: from --config, else "
         "optimal)")
      ->check(partitioner_name());
  cmd->add_option(
         "--config",
         args.config_file,
         "YAML config (cost model, floor, split_frames, ...); dotted "
         "overrides such as --" +
             std::string(kFrameShardingPath) + ".split_frames true follow it")
      ->check(non_empty());
  cmd->add_option(
         "--tower",
         args.tower,
         "toy | qwen2-vl | qwen2.5-vl | qwen3-vl: the random tower checked "
         "(the Qwen ones, width 32, depth 2, also run split frames)")
      ->capture_default_str()
      ->check(CLI::IsMember(verify_tower_names()));
  cmd->add_option(
         "--min-local-patch-rows",
         args.min_local_patch_rows,
         "Floor of local patch rows (default: from --config, else 96)")
      ->check(floor_rows());
}

// The report, the timeout, the scaling; the hidden worker mode.
void add_run_options(CLI::App* cmd, VerifyArgs& args) {
  cmd->add_flag("--json", args.json, "Print one JSON object");
  cmd->add_option(
         "--timeout-ms",
         args.timeout_ms,
         "Collective timeout per rank; raise it for large workloads (the "
         "others wait while rank 0 runs the replicated reference)")
      ->capture_default_str();
  cmd->add_option(
         "--scale",
         args.workload.scale,
         "Divide every h and w by S (0: automatic, 1: as given)")
      ->capture_default_str();
  cmd->add_option(
         "--max-frame-patches",
         args.workload.max_frame_patches,
         "Automatic scale: largest frame after scaling (0: no limit)")
      ->capture_default_str();
  cmd->add_option(
         "--max-patches",
         args.workload.max_patches,
         "Automatic scale: total patch rows after scaling (0: no limit)")
      ->capture_default_str();
  // Hidden worker mode (started by the parent).
  cmd->add_option("--worker-rank", args.worker_rank)->group("");
  cmd->add_option("--store-path", args.store_path)->group("");
  cmd->add_option("--workload-label", args.workload_label)->group("");
  cmd->add_option("--inject-fault", args.inject_fault)
      ->group("")
      ->check(CLI::IsMember({"none", "loss", "exit"}));
}

}  // namespace

void register_verify_command(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check sharded vs replicated parity of a random Qwen-style tower over "
      "N local rank processes (outputs and every parameter gradient).");
  cmd->footer(kFooter);
  add_workload_options(cmd, *args);
  add_run_options(cmd, *args);
  cmd->allow_extras();
  cmd->callback([args, cmd] {
    args->overrides = cmd->remaining();
    int code = 0;
    if (args->worker_rank >= 0) {
      code = run_worker_guarded(
          "verify", args->worker_rank, [&] { return run_worker(*args); });
    } else {
      code = run_parent(*args);
    }
    if (code != 0) {
      throw CLI::RuntimeError(code);
    }
  });
}

}  // namespace cli
}  // namespace frameshard
