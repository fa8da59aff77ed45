// `frameshard encode`: run a Hugging Face Qwen-VL-family vision tower
// (config.json + safetensors) on packed pixel rows, optionally sharded over
// N local rank processes through frameshard::encode.
//
//   frameshard encode --model-dir DIR --inputs IN.safetensors
//                     --out OUT.safetensors [--dtype float32|bfloat16|
//                     float16|float64] [--nproc N] [--partitioner P]
//
// IN holds `pixel_values` (floating [rows, C*T*P*P]) and `grid_thw` (integer
// [n, 3]); OUT receives `embeddings` ([tokens, out_hidden], float32 whatever
// --dtype) and, for Qwen3-VL, `deepstack_0`, `deepstack_1`, ... (HF's
// deepstack_features order), plus metadata (model_type, family, dtype,
// nproc). --nproc 1 runs the tower on everything in this process. With
// --nproc N > 1 the parent validates the inputs and starts N copies of this
// binary (fork + exec of /proc/self/exe, hidden worker mode, rendezvous
// through a c10d::FileStore in a fresh temporary directory); every worker
// loads the model and runs frameshard::encode (sharded path forced on, cost
// model from the tower's own dimensions); rank 0 writes OUT. Frames are
// independent, so the result equals --nproc 1 up to float rounding of
// differently shaped GEMMs.
//
// float16: refused on the CPU (this command runs there) until it is checked
// against transformers: torch 2.x has the CPU kernels, but nothing measures
// their float16 accuracy on these towers yet; the loader converts to float16
// fine.
// Exit codes: 0 success, 2 an error (bad option or file, a rank failed).

#include "commands.h"
#include "dotted_overrides.h"
#include "dtype_option.h"
#include "option_checks.h"
#include "pieces_report.h"
#include "rank_processes.h"
#include "shard_options.h"
#include "tower/check.h"

#include <frameshard/config.h>
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/models/qwen_vision.h>
#include <frameshard/models/safetensors.h>
#include <frameshard/plan.h>
#include <frameshard/runtime/encode.h>
#include <frameshard/runtime/process_group.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

struct EncodeArgs {
  std::string model_dir;
  std::string inputs;
  std::string out;
  std::string dtype = "float32";
  int nproc = 1;
  std::string partitioner;            // empty: optimal
  int64_t min_local_patch_rows = -1;  // -1: the planner's default
  int64_t timeout_ms = 120000;
  bool json = false;
  std::string config_file;             // --config: YAML (split_frames, ...)
  std::vector<std::string> overrides;  // dotted config overrides
  // Hidden worker mode.
  int worker_rank = -1;
  std::string store_path;
};

at::ScalarType parse_encode_dtype(const std::string& name) {
  return parse_dtype_option(
      name, "encode", {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble});
}

struct Inputs {
  at::Tensor pixel_values;
  at::Tensor grid_thw;  // int64 [n, 3]
  std::vector<GridThw> grid;
  FrameSet frames;
};

// Reads and validates IN against the model's config, so a mismatch is one
// clear error before any rank starts.
Inputs read_inputs(
    const std::string& path, const models::QwenVisionConfig& config) {
  models::SafetensorsFile f(path);
  for (const char* name : {"pixel_values", "grid_thw"}) {
    FRAMESHARD_CHECK(
        f.contains(name),
        "encode",
        "expected a tensor \"",
        name,
        "\" in ",
        path,
        ", got only: ",
        [&] {
          // The first few names: a checkpoint may hold thousands.
          const auto names = f.names();
          std::string s;
          for (size_t i = 0; i < names.size() && i < 8; ++i) {
            s += (i ? ", " : "") + names[i];
          }
          if (names.size() > 8) {
            s += " and " + std::to_string(names.size() - 8) + " more";
          }
          return s.empty() ? std::string("(none)") : s;
        }());
  }
  Inputs in;
  in.pixel_values = f.read("pixel_values");
  at::Tensor g = f.read("grid_thw");
  FRAMESHARD_CHECK(
      in.pixel_values.dim() == 2 &&
          at::isFloatingType(in.pixel_values.scalar_type()) &&
          in.pixel_values.size(1) == config.in_features(),
      "encode",
      "expected pixel_values of ",
      path,
      " floating [rows, ",
      config.in_features(),
      "] (in_channels * temporal_patch_size * patch_size^2 of the model), "
      "got ",
      in.pixel_values.scalar_type(),
      " ",
      in.pixel_values.sizes());
  FRAMESHARD_CHECK(
      g.dim() == 2 && g.size(1) == 3 && g.size(0) >= 1 &&
          !at::isFloatingType(g.scalar_type()),
      "encode",
      "expected an integer grid_thw [n, 3] with n >= 1 in ",
      path,
      ", got ",
      g.scalar_type(),
      " ",
      g.sizes());
  in.grid_thw = g.to(at::kLong).contiguous();
  in.grid = grid_from_tensor(in.grid_thw);
  in.frames = expand_frames(in.grid, models::media_layout(config));
  check_pixel_rows(in.frames, in.pixel_values.size(0));
  return in;
}

models::QwenVisionModel load_model(const EncodeArgs& a) {
  models::QwenLoadOptions lo;
  lo.dtype = parse_encode_dtype(a.dtype);
  models::QwenVisionModel m = models::load_qwen_vision(a.model_dir, lo);
  for (auto& p : m.module->parameters()) {
    p.requires_grad_(false);  // inference only
  }
  return m;
}

PlanOptions encode_plan_options(
    const EncodeArgs& a, const models::QwenVisionConfig& config) {
  const Config c = command_config(a.config_file, a.overrides, "encode");
  // The tower's own sizes: its FLOPs (unless the config names another cost
  // model), its windows (pieces must end on window rows) and its layout.
  PlanOptions o = plan_options(c, models::tower_dims(config));
  o.layout = models::media_layout(config);
  FRAMESHARD_CHECK(
      !o.split.enabled || models::takes_pieces(config),
      "encode",
      "expected frame_sharding.split_frames false for a ",
      models::to_string(config.family()),
      " tower (it does not take pieces of split frames), got true");
  // The user asked for N ranks: always take the sharded path.
  apply_shard_options(o, a.nproc, a.partitioner, a.min_local_patch_rows);
  return o;
}

void write_outputs(
    const EncodeArgs& a,
    const models::QwenVisionModel& m,
    const std::vector<at::Tensor>& outputs) {
  const auto names = m.config.output_names();
  FRAMESHARD_TORCH_CHECK(
      outputs.size() == names.size(),
      "encode",
      "expected ",
      names.size(),
      " tower outputs, got ",
      outputs.size());
  std::map<std::string, at::Tensor> tensors;
  for (size_t k = 0; k < names.size(); ++k) {
    tensors[names[k]] = outputs[k].detach().to(at::kFloat).contiguous();
  }
  models::save_safetensors(
      a.out,
      tensors,
      {{"format", "pt"},
       {"model_type", m.config.model_type},
       {"family", models::to_string(m.config.family())},
       {"dtype", a.dtype},
       {"nproc", std::to_string(a.nproc)}});
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

// One report for both modes (rank 0 prints it).
void report(
    const EncodeArgs& a,
    const models::QwenVisionModel& m,
    const Inputs& in,
    const std::vector<at::Tensor>& outputs,
    double encode_ms,
    const ShardPlan* plan,
    const std::vector<int64_t>& bytes_sent) {
  const auto names = m.config.output_names();
  if (a.json) {
    nlohmann::json j;
    j["model_type"] = m.config.model_type;
    j["family"] = models::to_string(m.config.family());
    j["weight_prefix"] = m.weights->prefix;
    j["weight_files"] = m.weights->files;
    j["tensors_loaded"] = m.weights->loaded;
    j["tensors_ignored"] = m.weights->ignored;
    j["dtype"] = a.dtype;
    j["nproc"] = a.nproc;
    j["media"] = in.grid.size();
    j["frame_units"] = in.frames.units.size();
    j["patch_rows"] = in.frames.total_patch_rows;
    j["tokens"] = in.frames.total_tokens;
    nlohmann::json outs = nlohmann::json::object();
    for (size_t k = 0; k < names.size(); ++k) {
      outs[names[k]] = outputs[k].sizes().vec();
    }
    j["outputs"] = outs;
    j["out"] = a.out;
    j["encode_ms"] = encode_ms;
    if (plan) {
      nlohmann::json ranks = nlohmann::json::array();
      for (const auto& r : plan->ranks) {
        ranks.push_back(
            {{"rank", r.rank},
             {"units", r.units.size()},
             {"patch_rows", r.real_patch_rows},
             {"tokens", r.real_tokens},
             {"pad_frames", r.pad_frames},
             {"dummy_frames", r.dummy_frames},
             {"pieces", pieces_json(*plan, r)},
             {"exchange_rows", r.exchange_rows}});
      }
      j["plan"] = {
          {"path", to_string(plan->path)},
          {"partitioner", to_string(plan->options.partitioner)},
          {"cost_model", plan->options.cost.label},
          {"imbalance", plan->partition.imbalance()},
          {"split", plan->split},
          {"ranks", ranks}};
      j["bytes_sent"] = bytes_sent;
    }
    std::cout << j.dump(2) << std::endl;
    return;
  }
  std::ostringstream os;
  os << "frameshard encode: " << m.config.model_type << " ("
     << models::to_string(m.config.family()) << " tower), " << m.weights->loaded
     << " tensors under \"" << m.weights->prefix << "\" from "
     << m.weights->files.size() << " file(s), dtype " << a.dtype << ", "
     << a.nproc << " rank" << (a.nproc > 1 ? "s" : "") << "\n";
  os << "inputs: " << in.grid.size() << " media, " << in.frames.units.size()
     << " frame units, " << in.frames.total_patch_rows << " patch rows -> "
     << in.frames.total_tokens << " tokens\n";
  if (plan) {
    os << "plan: " << to_string(plan->path) << ", partitioner "
       << to_string(plan->options.partitioner) << ", cost "
       << plan->options.cost.label << ", imbalance " << std::fixed
       << std::setprecision(3) << plan->partition.imbalance() << "\n";
    for (const auto& r : plan->ranks) {
      const auto i = static_cast<size_t>(r.rank);
      os << "  rank " << r.rank << ": " << r.units.size() << " units, "
         << r.real_patch_rows << " patch rows, " << r.real_tokens << " tokens, "
         << r.pad_frames << " floor + " << r.dummy_frames << " dummy frames, "
         << (i < bytes_sent.size() ? bytes_sent[i] : 0) << " bytes sent"
         << pieces_text(*plan, r) << "\n";
    }
  }
  os << "wrote " << a.out << ":";
  for (size_t k = 0; k < names.size(); ++k) {
    os << (k ? "," : "") << " " << names[k] << " " << shape_text(outputs[k]);
  }
  os << std::fixed << std::setprecision(1) << " (encode " << encode_ms
     << " ms)\n";
  std::cout << os.str() << std::flush;
}

void check_dtype_supported(at::ScalarType dtype) {
  FRAMESHARD_CHECK(
      dtype != at::kHalf,
      "encode",
      "expected --dtype float32, bfloat16 or float64 on CPU, got float16 "
      "(float16 towers on the CPU are not checked against transformers yet; "
      "use bfloat16)");
}

// --nproc 1: the tower on everything, in this process.
int run_single(const EncodeArgs& a) {
  check_dtype_supported(parse_encode_dtype(a.dtype));
  const auto config = models::load_qwen_vision_config(a.model_dir);
  const Inputs in = read_inputs(a.inputs, config);
  const models::QwenVisionModel m = load_model(a);
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  TowerInput ti;
  ti.pixel_values = in.pixel_values.to(parse_encode_dtype(a.dtype));
  ti.grid_thw = in.grid_thw;
  ti.cu_seqlens = frame_cu_seqlens(in.grid);
  const std::vector<at::Tensor> outputs = m.tower(ti);
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  write_outputs(a, m, outputs);
  report(a, m, in, outputs, ms, nullptr, {});
  return 0;
}

int run_worker(const EncodeArgs& a) {
  at::set_num_threads(1);
  check_dtype_supported(parse_encode_dtype(a.dtype));
  const int rank = a.worker_rank;
  const auto config = models::load_qwen_vision_config(a.model_dir);
  const Inputs in = read_inputs(a.inputs, config);
  const models::QwenVisionModel m = load_model(a);
  GroupOptions go;
  go.timeout = std::chrono::milliseconds(a.timeout_ms);
  go.threads = 1;
  ProcessGroupPtr pg = make_file_store_group(a.store_path, rank, a.nproc, go);

  EncodeOptions eo;
  eo.plan = encode_plan_options(a, config);
  eo.timeout = std::chrono::milliseconds(a.timeout_ms);
  eo.tower_trainable = false;
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  EncodeResult res = encode(
      m.tower,
      in.pixel_values.to(parse_encode_dtype(a.dtype)),
      in.grid_thw,
      pg,
      eo);
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  // Bytes per rank for the report.
  at::Tensor bytes = torch::zeros({a.nproc}, torch::kLong);
  bytes[rank] = res.bytes_sent;
  {
    std::vector<at::Tensor> v{bytes};
    pg->allreduce(v)->wait();
  }
  if (rank == 0) {
    write_outputs(a, m, res.outputs);
    std::vector<int64_t> sent(
        bytes.data_ptr<int64_t>(), bytes.data_ptr<int64_t>() + a.nproc);
    report(a, m, in, res.outputs, ms, &res.plan, sent);
  }
  // Nobody leaves before rank 0 has written OUT (a peer's exit must not
  // look like a failure to the others).
  pg->barrier()->wait();
  return 0;
}

int run_parent(const EncodeArgs& a) {
  check_rank_options("encode", a.nproc, a.timeout_ms);
  check_dtype_supported(parse_encode_dtype(a.dtype));
  if (a.nproc == 1) {
    return run_single(a);
  }
  // Validate everything once here: config, inputs, plan; the weights are
  // checked by every worker (loading them here too would double the cost).
  const auto config = models::load_qwen_vision_config(a.model_dir);
  const Inputs in = read_inputs(a.inputs, config);
  make_plan(in.grid, encode_plan_options(a, config));

  TempDir dir("encode");
  RankLaunch launch;
  launch.command = "encode";
  launch.nproc = a.nproc;
  launch.store_path = dir.path() + "/store";
  launch.timeout = std::chrono::milliseconds(a.timeout_ms);
  launch.worker_args = {
      "--model-dir",
      std::filesystem::absolute(a.model_dir).string(),
      "--inputs",
      std::filesystem::absolute(a.inputs).string(),
      "--out",
      std::filesystem::absolute(a.out).string(),
      "--dtype",
      a.dtype,
      "--nproc",
      std::to_string(a.nproc),
      "--timeout-ms",
      std::to_string(a.timeout_ms)};
  std::vector<std::string>& w = launch.worker_args;
  if (!a.partitioner.empty()) {
    w.insert(w.end(), {"--partitioner", a.partitioner});
  }
  if (a.min_local_patch_rows >= 0) {
    w.insert(
        w.end(),
        {"--min-local-patch-rows", std::to_string(a.min_local_patch_rows)});
  }
  if (a.json) {
    w.push_back("--json");
  }
  if (!a.config_file.empty()) {
    w.insert(
        w.end(),
        {"--config", std::filesystem::absolute(a.config_file).string()});
  }
  w.insert(w.end(), a.overrides.begin(), a.overrides.end());
  return run_rank_processes(launch);
}

}  // namespace

void register_encode_command(CLI::App& app) {
  auto args = std::make_shared<EncodeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "encode",
      "Run a Hugging Face Qwen-VL-family vision tower (qwen2_vl, "
      "qwen2_5_vl, qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe) on packed "
      "pixel rows, optionally sharded over N local ranks.");
  cmd->footer(
      "IN: safetensors with pixel_values [rows, C*T*P*P] and grid_thw "
      "[n, 3]. OUT: safetensors with embeddings [tokens, out_hidden] "
      "(float32) and, for Qwen3-VL, deepstack_0, deepstack_1, ...\n"
      "--nproc N > 1 shards the frames over N rank processes through "
      "frameshard::encode (Gloo on loopback); the result equals --nproc 1 "
      "up to float rounding.\n"
      "Exit codes: 0 success, 2 an error.");
  cmd->add_option(
         "--model-dir",
         args->model_dir,
         "Directory with config.json and model.safetensors (or a sharded "
         "model.safetensors.index.json)")
      ->required();
  cmd->add_option(
         "--inputs", args->inputs, "safetensors with pixel_values, grid_thw")
      ->required();
  cmd->add_option("--out", args->out, "Output safetensors file")->required();
  cmd->add_option(
         "--dtype",
         args->dtype,
         "float32 | bfloat16 | float16 | float64 (weights and compute)")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "bfloat16", "float16", "float64"}));
  cmd->add_option("--nproc", args->nproc, "Rank processes (1: no sharding)")
      ->capture_default_str();
  cmd->add_option(
         "--partitioner",
         args->partitioner,
         "optimal | greedy | count | lpt (default optimal)")
      ->check(partitioner_name());
  cmd->add_option(
         "--min-local-patch-rows",
         args->min_local_patch_rows,
         "Floor of local patch rows per rank (default: the planner's, 96)")
      ->check(floor_rows());
  cmd->add_option(
         "--timeout-ms", args->timeout_ms, "Collective timeout per rank")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option(
         "--config",
         args->config_file,
         "YAML config (split_frames, partitioner, floor, ...); dotted "
         "overrides such as --" +
             std::string(kFrameShardingPath) + ".split_frames true follow it")
      ->check(non_empty());
  cmd->add_option("--worker-rank", args->worker_rank)->group("");
  cmd->add_option("--store-path", args->store_path)->group("");
  cmd->allow_extras();

  cmd->callback([args, cmd] {
    args->overrides = cmd->remaining();
    int code = 0;
    if (args->worker_rank >= 0) {
      code = run_worker_guarded(
          "encode", args->worker_rank, [&] { return run_worker(*args); });
    } else {
      try {
        code = run_parent(*args);
      } catch (const c10::Error& e) {
        // Without the C++ backtrace c10::Error::what() carries.
        throw Error(e.what_without_backtrace());
      }
    }
    if (code != 0) {
      throw CLI::RuntimeError(code);
    }
  });
}

}  // namespace cli
}  // namespace frameshard
