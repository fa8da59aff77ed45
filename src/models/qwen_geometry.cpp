// The index math of the Qwen-VL towers (see qwen_geometry.h). Rotary
// tables and interpolation weights mirror transformers' eager path op by
// op, where the order of floating-point operations matters.
#include "models/qwen_geometry.h"

#include "tower/check.h"
#include "tower/exact_trig.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace frameshard {
namespace models {
namespace detail {

namespace {

// Fills geo.cu, geo.rows and (with pieces) geo.local_rows from geo.grid and
// geo.pieces, validating the pieces.
void set_local_rows(FrameGeometry& geo, int64_t merge, const char* fn) {
  const int64_t unit = merge * merge;
  geo.cu.assign(1, 0);
  std::vector<int64_t> local;  // [begin, end) pairs of whole-frame rows
  int64_t whole = 0;           // rows of the whole frames so far
  int64_t frame = 0;
  size_t next = 0;  // next piece
  for (const GridThw& g : geo.grid) {
    const int64_t hw = g.h * g.w;
    for (int64_t t = 0; t < g.t; ++t, ++frame, whole += hw) {
      int64_t begin = 0;
      int64_t end = hw;
      if (next < geo.pieces.size() && geo.pieces[next].frame == frame) {
        const FramePiece& p = geo.pieces[next++];
        FRAMESHARD_TORCH_CHECK(
            p.begin >= 0 && p.begin < p.end && p.end <= hw &&
                p.begin % unit == 0 && p.end % unit == 0,
            fn,
            "expected piece rows [begin, end) of local frame ",
            frame,
            " inside its ",
            hw,
            " rows, not empty, on merged tokens (multiples of ",
            unit,
            "), got [",
            p.begin,
            ", ",
            p.end,
            ")");
        begin = p.begin;
        end = p.end;
      }
      geo.cu.push_back(geo.cu.back() + end - begin);
      if (!geo.pieces.empty()) {
        local.push_back(whole + begin);
        local.push_back(whole + end);
      }
    }
  }
  FRAMESHARD_TORCH_CHECK(
      next == geo.pieces.size(),
      fn,
      "expected pieces of ascending local frames in [0, ",
      frame,
      "), got piece ",
      next,
      " of ",
      geo.pieces.size(),
      next < geo.pieces.size()
          ? " for frame " + std::to_string(geo.pieces[next].frame)
          : std::string());
  geo.rows = geo.cu.back();
  if (geo.pieces.empty()) {
    return;
  }
  geo.local_rows = at::empty({geo.rows}, at::kLong);
  int64_t* out = geo.local_rows.data_ptr<int64_t>();
  for (size_t i = 0; i < local.size(); i += 2) {
    for (int64_t r = local[i]; r < local[i + 1]; ++r) {
      *out++ = r;
    }
  }
}

}  // namespace

at::Tensor FrameGeometry::local(const at::Tensor& whole) const {
  if (!local_rows.defined()) {
    return whole;
  }
  return whole.index_select(0, local_rows.to(whole.device()));
}

FrameGeometry check_tower_input(
    const TowerInput& input,
    int64_t in_features,
    int64_t merge,
    const char* fn) {
  const at::Tensor& pixels = input.pixel_values;
  FRAMESHARD_TORCH_CHECK(
      pixels.defined() && pixels.dim() == 2 && pixels.size(1) == in_features &&
          at::isFloatingType(pixels.scalar_type()),
      fn,
      "expected floating pixel_values [rows, ",
      in_features,
      "] (channels * temporal_patch_size * patch_size^2), got ",
      pixels.defined() ? pixels.sizes() : at::IntArrayRef{},
      pixels.defined() ? std::string(" ") + c10::toString(pixels.scalar_type())
                       : std::string(" undefined"));
  const at::Tensor& g = input.grid_thw;
  FRAMESHARD_TORCH_CHECK(
      g.defined() && g.dim() == 2 && g.size(1) == 3 &&
          !at::isFloatingType(g.scalar_type()),
      fn,
      "expected an integer grid_thw [n, 3], got ",
      g.defined() ? g.sizes() : at::IntArrayRef{});
  const at::Tensor grid = g.to(at::kCPU, at::kLong).contiguous();
  const int64_t* gp = grid.data_ptr<int64_t>();

  FrameGeometry geo;
  for (int64_t i = 0; i < grid.size(0); ++i) {
    GridThw row{gp[3 * i], gp[3 * i + 1], gp[3 * i + 2]};
    FRAMESHARD_TORCH_CHECK(
        row.t > 0 && row.h > 0 && row.w > 0 && row.h % merge == 0 &&
            row.w % merge == 0,
        fn,
        "expected grid_thw[",
        i,
        "] positive with h and w divisible by spatial_merge_size ",
        merge,
        ", got (",
        row.t,
        ", ",
        row.h,
        ", ",
        row.w,
        ")");
    geo.grid.push_back(row);
  }
  geo.pieces = input.pieces;
  set_local_rows(geo, merge, fn);
  FRAMESHARD_TORCH_CHECK(
      geo.rows == pixels.size(0),
      fn,
      "expected ",
      geo.rows,
      " pixel rows (sum of t*h*w over grid_thw",
      geo.pieces.empty() ? "" : ", pieces counting their rows",
      "), got ",
      pixels.size(0));
  if (input.cu_seqlens.defined()) {
    const at::Tensor cu = input.cu_seqlens.to(at::kCPU, at::kLong).contiguous();
    bool same =
        cu.dim() == 1 && cu.size(0) == static_cast<int64_t>(geo.cu.size());
    for (int64_t i = 0; same && i < cu.size(0); ++i) {
      same = cu.data_ptr<int64_t>()[i] == geo.cu[static_cast<size_t>(i)];
    }
    FRAMESHARD_TORCH_CHECK(
        same,
        fn,
        "expected cu_seqlens with one segment per temporal patch of grid_thw (",
        geo.cu.size(),
        " entries ending at ",
        geo.rows,
        "), got ",
        cu.sizes(),
        cu.numel() > 0
            ? " ending at " +
                  std::to_string(cu.data_ptr<int64_t>()[cu.numel() - 1])
            : std::string());
  }
  return geo;
}

at::Tensor patch_coordinates(const std::vector<GridThw>& grid, int64_t merge) {
  int64_t rows = 0;
  for (const auto& g : grid) {
    rows += g.t * g.h * g.w;
  }
  at::Tensor out = at::empty({rows, 2}, at::kLong);
  int64_t* p = out.data_ptr<int64_t>();
  for (const auto& g : grid) {
    int64_t* first = p;
    for (int64_t by = 0; by < g.h / merge; ++by) {
      for (int64_t bx = 0; bx < g.w / merge; ++bx) {
        for (int64_t iy = 0; iy < merge; ++iy) {
          for (int64_t ix = 0; ix < merge; ++ix) {
            *p++ = by * merge + iy;
            *p++ = bx * merge + ix;
          }
        }
      }
    }
    // Every temporal index repeats the spatial ids (frames independent).
    const int64_t frame = 2 * g.h * g.w;
    for (int64_t t = 1; t < g.t; ++t) {
      std::copy(first, first + frame, p);
      p += frame;
    }
  }
  return out;
}

Rotary rotary_tables(
    const at::Tensor& coords,
    int64_t head_dim,
    double theta,
    at::ScalarType dtype) {
  // HF: inv_freq = 1 / theta ** (arange(0, d, 2) / d) with d = head_dim / 2
  // (head_dim / 4 frequencies, shared by h and w).
  const int64_t d = head_dim / 2;
  const auto opts = at::TensorOptions().dtype(dtype);  // on the CPU
  at::Tensor inv_freq =
      at::reciprocal(at::pow(theta, at::arange(0, d, 2, opts) / d));
  // Like HF, the angles of every coordinate value 0..max once (the same
  // float products as coords * inv_freq), then gathered per row; cos and sin
  // of that small table from libm (exact_trig.h: torch's CPU cos was seen
  // off by 1.5e-4 in one thread's chunk, past the parity towers' bound).
  const at::Tensor flat = coords.reshape({-1}).to(at::kCPU, at::kLong);
  const int64_t span = flat.numel() > 0 ? flat.max().item<int64_t>() + 1 : 1;
  const auto trig = ::frameshard::detail::exact_cos_sin(
      at::arange(span, opts).unsqueeze(-1) * inv_freq);  // [span, f]
  const at::Tensor& cos_table = trig.cos;
  const at::Tensor& sin_table = trig.sin;
  const int64_t rows = coords.size(0);
  auto per_row = [&](const at::Tensor& table) {  // [rows, 2 * f], h then w
    const at::Tensor hw = table.to(dtype).index_select(0, flat).reshape(
        {rows, 2 * inv_freq.numel()});
    return at::cat({hw, hw}, -1).to(coords.device());
  };
  return {per_row(cos_table), per_row(sin_table)};
}

WindowIndex window_index(
    const FrameGeometry& geo,
    int64_t merge,
    int64_t merger_window_size,
    const char* fn) {
  const int64_t vw = merger_window_size;
  const int64_t unit = merge * merge;
  std::vector<int64_t> index;
  WindowIndex out;
  out.cu.push_back(0);
  int64_t base = 0;  // first local merge unit of the frame
  int64_t frame = 0;
  size_t next = 0;  // next piece
  for (const auto& g : geo.grid) {
    const int64_t lh = g.h / merge;
    const int64_t lw = g.w / merge;
    // HF pads each frame's token grid up to whole windows (even when it
    // already divides: an extra empty window row/column, dropped below).
    const int64_t nwh = (lh + vw - lh % vw) / vw;
    const int64_t nww = (lw + vw - lw % vw) / vw;
    for (int64_t t = 0; t < g.t; ++t, ++frame) {
      // A piece holds merge units [first, last) of the frame, whole window
      // rows: its windows are the frame's windows of those rows.
      const int64_t band = vw * lw;  // merge units per window row
      int64_t first = 0;
      int64_t last = lh * lw;
      if (next < geo.pieces.size() && geo.pieces[next].frame == frame) {
        const FramePiece& p = geo.pieces[next++];
        first = p.begin / unit;
        last = p.end / unit;
        FRAMESHARD_TORCH_CHECK(
            first % band == 0 && (last % band == 0 || last == lh * lw),
            fn,
            "expected the piece of local frame ",
            frame,
            " to hold whole window rows (rows multiples of ",
            band * unit,
            " = window_size/patch_size ",
            vw * merge,
            " x w ",
            g.w,
            ", so window layers stay local; plan with split.window_side ",
            vw * merge,
            "), got rows [",
            p.begin,
            ", ",
            p.end,
            ")");
      }
      for (int64_t wy = first / band; wy < nwh && wy * band < last; ++wy) {
        for (int64_t wx = 0; wx < nww; ++wx) {
          int64_t count = 0;
          for (int64_t iy = 0; iy < vw; ++iy) {
            const int64_t y = wy * vw + iy;
            for (int64_t ix = 0; ix < vw; ++ix) {
              const int64_t x = wx * vw + ix;
              if (y < lh && x < lw) {
                index.push_back(base + y * lw + x - first);
                ++count;
              }
            }
          }
          if (count > 0) {
            out.cu.push_back(out.cu.back() + count * unit);
          }
        }
      }
      base += last - first;
    }
  }
  const auto n = static_cast<int64_t>(index.size());
  out.index = at::empty({n}, at::kLong);
  std::copy(index.begin(), index.end(), out.index.data_ptr<int64_t>());
  out.inverse = at::empty({n}, at::kLong);
  int64_t* inv = out.inverse.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    inv[index[static_cast<size_t>(i)]] = i;
  }
  return out;
}

at::Tensor permute_units(
    const at::Tensor& x, const at::Tensor& index, int64_t unit) {
  const int64_t rows = x.size(0);
  return x.reshape({rows / unit, unit, -1})
      .index_select(0, index.to(x.device()))
      .reshape({rows, -1});
}

Interpolation bilinear_positions(
    const std::vector<GridThw>& grid,
    const at::Tensor& coords,
    int64_t side,
    at::ScalarType dtype) {
  const int64_t rows = coords.size(0);
  at::Tensor heights = at::empty({rows}, at::kLong);
  at::Tensor widths = at::empty({rows}, at::kLong);
  {
    int64_t* hp = heights.data_ptr<int64_t>();
    int64_t* wp = widths.data_ptr<int64_t>();
    for (const auto& g : grid) {
      std::fill(hp, hp + g.t * g.h * g.w, g.h);
      std::fill(wp, wp + g.t * g.h * g.w, g.w);
      hp += g.t * g.h * g.w;
      wp += g.t * g.h * g.w;
    }
  }
  // One axis, as HF's _interpolation_axis_taps_weights (bilinear,
  // align_corners, border padding), op for op.
  const at::Tensor offsets = at::arange(0, 2, at::kLong);
  auto axis = [&](const at::Tensor& index, const at::Tensor& size) {
    at::Tensor src = index.to(dtype) * (side - 1) / at::clamp_min(size - 1, 1);
    at::Tensor floor = at::floor(src);
    at::Tensor taps =
        (floor.to(at::kLong).unsqueeze(1) + offsets).clamp(0, side - 1);
    at::Tensor distance =
        (src.unsqueeze(1) - floor.unsqueeze(1) - offsets).abs();
    at::Tensor weights = (1 - distance).clamp_min(0);
    return std::make_pair(taps, weights);
  };
  auto h = axis(coords.select(1, 0), heights);
  auto w = axis(coords.select(1, 1), widths);
  Interpolation out;
  out.indices =
      (h.first.unsqueeze(2) * side + w.first.unsqueeze(1)).reshape({rows, 4});
  out.weights =
      (h.second.unsqueeze(2) * w.second.unsqueeze(1)).reshape({rows, 4});
  return out;
}

}  // namespace detail
}  // namespace models
}  // namespace frameshard
