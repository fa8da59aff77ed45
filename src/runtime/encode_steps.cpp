// The steps encode and encode_mesh share (runtime/encode_steps.h).
#include "runtime/encode_steps.h"

#include "core/fingerprint.h"
#include "runtime/fault.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <sstream>

namespace frameshard {
namespace internal {

namespace {

void check_tower_outputs(
    const std::vector<at::Tensor>& outs,
    int64_t expected_rows,
    const char* rows_meaning,
    const std::string& prefix) {
  TORCH_CHECK(
      !outs.empty(),
      prefix,
      "expected the tower to return at least "
      "one tensor, got none");
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    TORCH_CHECK(
        o.defined(),
        prefix,
        "expected tower output ",
        i,
        " to be a defined tensor, got an undefined one");
    TORCH_CHECK(
        o.dim() == 2,
        prefix,
        "expected tower output ",
        i,
        " to be a 2-D [rows, hidden] tensor, got shape ",
        shape_text(o));
    TORCH_CHECK(
        o.size(0) == expected_rows,
        prefix,
        "expected tower output ",
        i,
        " to have ",
        expected_rows,
        " rows (",
        rows_meaning,
        "), got ",
        o.size(0));
    TORCH_CHECK(
        o.scalar_type() == outs[0].scalar_type(),
        prefix,
        "expected all tower outputs to have one dtype (",
        outs[0].scalar_type(),
        "), got ",
        o.scalar_type(),
        " for output ",
        i);
    TORCH_CHECK(
        o.device() == outs[0].device(),
        prefix,
        "expected all tower outputs on one device (",
        outs[0].device(),
        "), got ",
        o.device(),
        " for output ",
        i);
  }
}

}  // namespace

std::string shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

TowerInput shard_tower_input(
    const RankShard& shard,
    const std::vector<at::Tensor>& real,
    const at::Tensor& like) {
  const c10::Device device = like.device();
  std::vector<at::Tensor> pieces = real;
  const int64_t zero_rows = shard.local_patch_rows - shard.real_patch_rows;
  if (zero_rows > 0) {
    // Floor and dummy frames: zeros, never merged with real media; their
    // output rows are dropped before any collective.
    pieces.push_back(at::zeros({zero_rows, like.size(1)}, like.options()));
  }
  TowerInput in;
  in.pixel_values = pieces.empty()       ? like.narrow(0, 0, 0)
                    : pieces.size() == 1 ? pieces[0]
                                         : at::cat(pieces, 0);
  in.grid_thw = grid_to_tensor(shard.grid, device);
  in.cu_seqlens = cu_seqlens_tensor(shard.cu_seqlens, device);
  in.pieces = shard.pieces;
  return in;
}

LocalOutputs run_tower_step(
    const VisionTower& tower,
    const TowerInput& in,
    int64_t expected_rows,
    const char* rows_meaning,
    int64_t real_rows,
    int rank,
    const std::string& prefix,
    std::string& stage) {
  stage = "while running the tower";
  fault_point("tower", rank);
  LocalOutputs lo;
  lo.outputs = tower(in);
  stage = "while checking the tower outputs";
  check_tower_outputs(lo.outputs, expected_rows, rows_meaning, prefix);
  for (const auto& o : lo.outputs) {
    lo.widths.push_back(o.size(1));
  }
  if (real_rows >= 0) {
    // Floor and dummy rows are the tail, dropped here so they never enter
    // a collective.
    for (auto& o : lo.outputs) {
      o = o.narrow(0, 0, real_rows);
    }
    lo.fused = lo.outputs.size() == 1 ? lo.outputs[0] : at::cat(lo.outputs, 1);
  }
  stage = "after the tower";
  return lo;
}

void describe_outputs(
    const LocalOutputs& lo, bool sharded, ConsensusRecord& mine) {
  mine.path = sharded ? 0 : 1;
  mine.dtype = static_cast<int64_t>(lo.outputs[0].scalar_type());
  mine.widths = lo.widths;
  if (sharded) {
    mine.rows = lo.fused.size(0);
    mine.requires_grad = mine.grad_mode && lo.fused.requires_grad();
  } else {
    mine.rows = lo.outputs[0].size(0);
  }
}

bool any_requires_grad(const std::vector<ConsensusRecord>& records) {
  return std::any_of(
      records.begin(), records.end(), [](const ConsensusRecord& r) {
        return r.requires_grad;
      });
}

at::Tensor joined_for_backward(const at::Tensor& send, bool any_grad) {
  if (any_grad && !send.requires_grad()) {
    return send.detach().requires_grad_();
  }
  return send;
}

std::vector<at::Tensor> split_widths(
    const at::Tensor& fused, const std::vector<int64_t>& widths) {
  std::vector<at::Tensor> outs;
  int64_t offset = 0;
  for (int64_t w : widths) {
    outs.push_back(widths.size() == 1 ? fused : fused.narrow(1, offset, w));
    offset += w;
  }
  return outs;
}

int64_t row_bytes(const std::vector<int64_t>& widths, at::ScalarType dtype) {
  const int64_t width =
      std::accumulate(widths.begin(), widths.end(), int64_t{0});
  return width * static_cast<int64_t>(c10::elementSize(dtype));
}

uint64_t owner_fingerprint(const std::vector<int64_t>& owner) {
  if (owner.empty()) {
    return 0;
  }
  Fingerprint fp;
  fp.add(static_cast<int64_t>(owner.size()));
  for (int64_t o : owner) {
    fp.add(o);
  }
  return fp.finish();
}

std::vector<int64_t> owned_rows(
    const std::vector<int64_t>& owner, int64_t rank) {
  std::vector<int64_t> rows;
  for (size_t t = 0; t < owner.size(); ++t) {
    if (owner[t] == rank) {
      rows.push_back(static_cast<int64_t>(t));
    }
  }
  return rows;
}

void select_rows(
    std::vector<at::Tensor>& outputs, const std::vector<int64_t>& rows) {
  if (outputs.empty()) {
    return;
  }
  at::Tensor idx = at::tensor(rows, at::kLong).to(outputs[0].device());
  for (auto& o : outputs) {
    o = o.index_select(0, idx);
  }
}

at::Tensor distinct_pixels(
    const at::Tensor& pixel_values, const FrameDedup& dedup) {
  if (dedup.identity()) {
    return pixel_values;
  }
  std::vector<at::Tensor> rows;
  for (const RowRange& r : dedup.pixel_rows) {
    rows.push_back(pixel_values.narrow(0, r.begin, r.size()));
  }
  return rows.size() == 1 ? rows[0] : at::cat(rows);
}

void expand_uses(const FrameDedup& dedup, std::vector<at::Tensor>& outputs) {
  if (dedup.identity()) {
    return;
  }
  for (at::Tensor& o : outputs) {
    o = o.index_select(
        0, at::tensor(dedup.token_source, at::kLong).to(o.device()));
  }
}

}  // namespace internal
}  // namespace frameshard
