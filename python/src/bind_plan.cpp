// frameshard._C: the plan as a dict, cost models, workloads, visual token
// owners and the sequence split's positions (bindings.h). Pure: no
// communication.
#include "bindings.h"

#include <frameshard/owner_route.h>
#include <frameshard/tower.h>
#include <frameshard/workload.h>

#include <algorithm>
#include <string>
#include <vector>

namespace frameshard {
namespace python {

py::list grid_list(const std::vector<GridThw>& grid) {
  py::list out;
  for (const auto& g : grid) {
    out.append(py::make_tuple(g.t, g.h, g.w));
  }
  return out;
}

namespace {

py::dict rank_dict(const RankShard& r) {
  py::dict d;
  d["rank"] = r.rank;
  d["units"] = r.units;
  d["grid"] = grid_list(r.grid);
  py::list ranges;
  for (const auto& range : r.pixel_ranges) {
    ranges.append(py::make_tuple(range.begin, range.end));
  }
  d["pixel_ranges"] = ranges;
  d["cu_seqlens"] = r.cu_seqlens;
  d["real_patch_rows"] = r.real_patch_rows;
  d["real_tokens"] = r.real_tokens;
  d["pad_frames"] = r.pad_frames;
  d["dummy_frames"] = r.dummy_frames;
  d["local_patch_rows"] = r.local_patch_rows;
  d["local_tokens"] = r.local_tokens;
  d["cost"] = r.cost;
  py::list pieces;
  for (const FramePiece& p : r.pieces) {
    pieces.append(py::make_tuple(p.frame, p.begin, p.end));
  }
  d["pieces"] = pieces;
  d["exchange_rows"] = r.exchange_rows;
  return d;
}

}  // namespace

py::dict plan_dict(const ShardPlan& plan) {
  py::dict d;
  d["path"] = to_string(plan.path);
  d["reason"] = plan.reason;
  d["world"] = plan.options.world;
  d["partitioner"] = to_string(plan.partition.method);
  d["cost_model"] = plan.options.cost.label;
  d["grid"] = grid_list(plan.frames.grid);
  py::list units;
  for (const auto& u : plan.frames.units) {
    py::dict ud;
    ud["media"] = u.media;
    ud["frame"] = u.frame;
    ud["h"] = u.h;
    ud["w"] = u.w;
    ud["patch_rows"] = u.patch_rows;
    ud["tokens"] = u.tokens;
    ud["pixel_offset"] = u.pixel_offset;
    ud["token_offset"] = u.token_offset;
    units.append(ud);
  }
  d["units"] = units;
  d["unit_costs"] = plan.unit_costs;
  d["cuts"] = plan.partition.cuts;
  d["assignment"] = plan.partition.assignment;
  d["rank_costs"] = plan.partition.rank_costs;
  py::list ranks;
  for (const auto& r : plan.ranks) {
    ranks.append(rank_dict(r));
  }
  d["ranks"] = ranks;
  d["gather_counts"] = plan.gather_counts;
  d["restore_rows"] = plan.restore_rows;
  d["total_patch_rows"] = plan.frames.total_patch_rows;
  d["total_tokens"] = plan.frames.total_tokens;
  d["split"] = plan.split;
  d["unsplit_max_cost"] = plan.unsplit_max_cost;
  d["fingerprint"] = fingerprint_hex(plan.fingerprint);
  return d;
}

namespace {

py::dict plan_binding(
    const at::Tensor& grid_thw,
    const Overrides& overrides,
    int64_t cp_size,
    int64_t spatial_merge_size,
    int64_t temporal_patch_size,
    const py::object& tower) {
  const PlanOptions o = plan_options_from(
      overrides, cp_size, spatial_merge_size, temporal_patch_size, tower);
  return plan_dict(make_plan(grid_from_tensor(grid_thw), o));
}

py::dict cost_model_binding(const std::string& spec, const py::dict& tower) {
  const CostModel m = parse_cost_alpha(spec, tower_dims_from(tower));
  py::dict d;
  d["a"] = m.a;
  d["b"] = m.b;
  d["c"] = m.c;
  d["window_coef"] = m.window_coef;
  d["window"] = m.window;
  d["label"] = m.label;
  d["seconds_per_unit"] = m.seconds_per_unit;
  return d;
}

}  // namespace

void init_plan(py::module_& m) {
  m.def(
      "plan",
      &plan_binding,
      py::arg("grid_thw"),
      py::arg("overrides"),
      py::arg("cp_size"),
      py::arg("spatial_merge_size"),
      py::arg("temporal_patch_size"),
      py::arg("tower_dims") = py::none(),
      R"doc(The shard plan of an int64 [n, 3] grid_thw, as a dict; `tower_dims`
(TowerDims fields or None) is the tower cost_alpha auto counts.)doc");
  m.def(
      "cost_model",
      &cost_model_binding,
      py::arg("cost_alpha"),
      py::arg("tower_dims"),
      R"doc(The cost model a cost_alpha spec gives for a tower (TowerDims
fields), as a dict (a, b, c, window_coef, window, label,
seconds_per_unit).)doc");
  // (grid rows, spatial_merge_size, temporal_patch_size) of `w` scaled down by
  // `scale`.
  auto scaled_tuple = [](Workload w, int64_t scale) {
    if (scale != 1) {
      w = scale_workload(w, scale);
    }
    return py::make_tuple(
        grid_list(w.grid),
        w.layout.spatial_merge_size,
        w.layout.temporal_patch_size);
  };
  m.def(
      "workload",
      [scaled_tuple](const std::string& name, uint64_t seed, int64_t scale) {
        const auto names = workload_preset_names();
        const bool preset =
            std::find(names.begin(), names.end(), name) != names.end();
        return scaled_tuple(
            preset ? preset_workload(name, seed) : load_workload(name), scale);
      },
      py::arg("name"),
      py::arg("seed") = 0,
      py::arg("scale") = 1,
      R"doc((grid rows, spatial_merge_size, temporal_patch_size) of a workload
preset (doc, multi, video, mixed, grpo; seeded) or a workload JSON file, scaled
down by `scale` (frameshard/workload.h).)doc");
  m.def(
      "grpo_prompt_workload",
      [scaled_tuple](uint64_t seed, int64_t scale) {
        return scaled_tuple(grpo_prompt_workload(seed), scale);
      },
      py::arg("seed") = 0,
      py::arg("scale") = 1,
      R"doc(The same of the one prompt the grpo preset samples
(frameshard/workload.h grpo_prompt_workload).)doc");
  m.def(
      "visual_token_owners",
      [](const std::vector<int64_t>& positions,
         int64_t seq_len,
         int64_t cp,
         const std::string& split) {
        return visual_token_owners(
            positions, seq_len, cp, parse_sequence_split(split, "split"));
      },
      py::arg("media_positions"),
      py::arg("seq_len"),
      py::arg("cp_size"),
      py::arg("split"),
      R"doc(The CP rank owning each visual token (frameshard/owner_route.h).)doc");
  m.def(
      "chunk_positions",
      [](int64_t seq_len, int64_t cp, int64_t rank, const std::string& split) {
        return sequence_chunk_positions(
            seq_len, cp, rank, parse_sequence_split(split, "split"));
      },
      py::arg("seq_len"),
      py::arg("cp_size"),
      py::arg("rank"),
      py::arg("split"),
      R"doc(The global positions (ascending) of `rank`'s rows of a sequence of
seq_len padded to padded_length(seq_len, cp_size, split): chunks rank and
2cp-1-rank of 2cp (load_balanced), chunk rank of cp (contiguous)
(frameshard/owner_route.h sequence_chunk_positions).)doc");
  m.def(
      "padded_length",
      [](int64_t seq_len, int64_t cp, const std::string& split) {
        return padded_sequence_length(
            seq_len, cp, parse_sequence_split(split, "split"));
      },
      py::arg("seq_len"),
      py::arg("cp_size"),
      py::arg("split"),
      R"doc(seq_len rounded up to a multiple of 2 x cp_size (load_balanced) or
cp_size (contiguous).)doc");
}

}  // namespace python
}  // namespace frameshard
