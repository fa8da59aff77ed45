// The lane sums of frame_keys (runtime/frame_key_sums.h): tensor ops on
// any device, and one pass over the bytes on the CPU, equal bit for bit.
#include "runtime/frame_key_sums.h"

#include <frameshard/error.h>
#include <frameshard/splitmix64.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

namespace frameshard {
namespace internal {
namespace {

struct Lane {
  uint64_t column;  // seeds the lane's per-column weights
  uint64_t row;     // multiplies the row's index inside its unit
  uint64_t mix;     // the finaliser's multiplier
};

// Two lanes of odd 64-bit constants (splitmix64 / murmur3 finalisers').
constexpr std::array<Lane, 2> kLanes{{
    {0xbf58476d1ce4e5b9ULL, 0x94d049bb133111ebULL, 0xff51afd7ed558ccdULL},
    {0x2545f4914f6cdd1dULL, 0xd6e8feb86659fd93ULL, 0x87c37b91114253d5ULL},
}};

constexpr int64_t kLow29 = (int64_t{1} << 35) - 1;  // v >>> 29, logical
constexpr int64_t kLow32 = (int64_t{1} << 32) - 1;  // v >>> 32, logical

// Elements of one chunk's int64 copy in the tensor path (32 MiB).
constexpr int64_t kChunkElements = int64_t{1} << 22;

int64_t as_signed(uint64_t v) {
  int64_t s = 0;
  std::memcpy(&s, &v, sizeof(s));
  return s;
}

// A 64-bit mix of a row's sum (wrapping multiply, logical shifts).
uint64_t mix_row(uint64_t v, uint64_t k) {
  v ^= v >> 29;
  v *= k;
  return v ^ (v >> 32);
}

// The same on every element of an int64 tensor.
at::Tensor mix_rows(at::Tensor v, uint64_t k) {
  v = v.bitwise_xor(v.bitwise_right_shift(29).bitwise_and(kLow29));
  v = v.mul(as_signed(k));
  return v.bitwise_xor(v.bitwise_right_shift(32).bitwise_and(kLow32));
}

// One lane's weight of every column: odd pseudo-random 64-bit words, so a
// row's weighted sum modulo 2^64 changes with any single element (an odd
// weight times a non-zero difference below 2^64 is never 0 mod 2^64).
std::vector<uint64_t> column_weights(int64_t features, uint64_t seed) {
  std::vector<uint64_t> w(static_cast<size_t>(features));
  for (int64_t c = 0; c < features; ++c) {
    w[static_cast<size_t>(c)] = mix64(seed + static_cast<uint64_t>(c)) | 1U;
  }
  return w;
}

at::Tensor weights_tensor(int64_t features, uint64_t seed, c10::Device d) {
  std::vector<int64_t> w;
  for (uint64_t v : column_weights(features, seed)) {
    w.push_back(as_signed(v));
  }
  return at::tensor(w, at::kLong).to(d);
}

void check_element_size(const at::Tensor& pixels) {
  const auto size = pixels.element_size();
  FRAMESHARD_CHECK(
      size == 1 || size == 2 || size == 4 || size == 8,
      "frame_keys",
      "expected pixel_values with 1-, 2-, 4- or 8-byte elements, got ",
      size,
      "-byte ",
      pixels.scalar_type());
}

// The pixel bytes as integers of the element's width, widened to int64.
at::Tensor integer_view(const at::Tensor& pixels) {
  const at::Tensor x = pixels.contiguous();
  switch (x.element_size()) {
    case 1:
      return x.view(at::kByte).to(at::kLong);
    case 2:
      return x.view(at::kShort).to(at::kLong);
    case 4:
      return x.view(at::kInt).to(at::kLong);
    default:
      return x.view(at::kLong);
  }
}

// The lane sums of units whose row sums are known (`sums[l][row]`).
std::vector<LaneSums> unit_sums(
    const std::array<std::vector<uint64_t>, 2>& sums, const FrameSet& fs) {
  std::vector<LaneSums> out(fs.units.size(), LaneSums{0, 0});
  for (size_t u = 0; u < fs.units.size(); ++u) {
    const FrameUnit& unit = fs.units[u];
    for (size_t l = 0; l < kLanes.size(); ++l) {
      uint64_t acc = 0;
      for (int64_t i = 0; i < unit.patch_rows; ++i) {
        const auto r = static_cast<size_t>(unit.pixel_offset + i);
        acc += mix_row(
            sums[l][r] + static_cast<uint64_t>(i) * kLanes[l].row,
            kLanes[l].mix);
      }
      out[u][l] = acc;
    }
  }
  return out;
}

// Row sums of both lanes over rows [begin, end) of a contiguous [rows,
// features] array of T. The element is widened as integer_view does it:
// zero-extended for uint8, sign-extended otherwise.
template <typename T>
struct RowSums {
  const T* data;
  int64_t features;
  const uint64_t* w0;
  const uint64_t* w1;
  uint64_t* s0;
  uint64_t* s1;
};

// The loop, inlined into one copy per instruction set below (a 64-bit
// multiply vectorises with AVX-512DQ: about 14 GB/s on one core against
// 2.6 GB/s scalar, measured on this project's machine).
template <typename T>
[[gnu::always_inline]] inline void row_sums_body(
    const RowSums<T>& a, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* row = a.data + r * a.features;
    uint64_t s0 = 0;
    uint64_t s1 = 0;
    for (int64_t c = 0; c < a.features; ++c) {
      const auto v = static_cast<uint64_t>(static_cast<int64_t>(row[c]));
      s0 += v * a.w0[c];
      s1 += v * a.w1[c];
    }
    a.s0[r] = s0;
    a.s1[r] = s1;
  }
}

template <typename T>
void row_sums_default(const RowSums<T>& a, int64_t begin, int64_t end) {
  row_sums_body(a, begin, end);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename T>
[[gnu::target("avx2")]] void row_sums_avx2(
    const RowSums<T>& a, int64_t begin, int64_t end) {
  row_sums_body(a, begin, end);
}

template <typename T>
[[gnu::target("avx512f,avx512dq")]] void row_sums_avx512(
    const RowSums<T>& a, int64_t begin, int64_t end) {
  row_sums_body(a, begin, end);
}
#endif

// The copy for this CPU (the same bits from each).
template <typename T>
auto pick_row_sums() -> void (*)(const RowSums<T>&, int64_t, int64_t) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512f")) {
    return &row_sums_avx512<T>;
  }
  if (__builtin_cpu_supports("avx2")) {
    return &row_sums_avx2<T>;
  }
#endif
  return &row_sums_default<T>;
}

template <typename T>
void all_row_sums(
    const at::Tensor& x,
    const std::array<std::vector<uint64_t>, 2>& weights,
    std::array<std::vector<uint64_t>, 2>& sums) {
  const RowSums<T> args{
      static_cast<const T*>(x.data_ptr()),
      x.size(1),
      weights[0].data(),
      weights[1].data(),
      sums[0].data(),
      sums[1].data()};
  const auto run = pick_row_sums<T>();
  // About 64 KiB of pixels a task.
  const int64_t grain = std::max<int64_t>(
      1,
      (int64_t{1} << 16) /
          std::max<int64_t>(args.features * x.element_size(), 1));
  at::parallel_for(0, x.size(0), grain, [&](int64_t begin, int64_t end) {
    run(args, begin, end);
  });
}

}  // namespace

std::vector<LaneSums> unit_lane_sums_tensor(
    const at::Tensor& pixels, const FrameSet& fs) {
  check_element_size(pixels);
  const auto device = pixels.device();
  const int64_t features = pixels.size(1);
  const int64_t rows = pixels.size(0);
  std::array<at::Tensor, 2> weights;
  for (size_t l = 0; l < kLanes.size(); ++l) {
    weights[l] = weights_tensor(features, kLanes[l].column, device);
  }
  // Row sums, a chunk of rows at a time (the int64 copy of a chunk is the
  // only temporary as large as the pixels).
  std::array<std::vector<at::Tensor>, 2> parts;
  const int64_t chunk =
      std::max<int64_t>(1, kChunkElements / std::max<int64_t>(features, 1));
  for (int64_t r = 0; r < rows; r += chunk) {
    const at::Tensor x =
        integer_view(pixels.narrow(0, r, std::min(chunk, rows - r)));
    for (size_t l = 0; l < kLanes.size(); ++l) {
      parts[l].push_back(x.mul(weights[l]).sum(1));
    }
  }
  std::vector<int64_t> begin;
  std::vector<int64_t> counts;
  for (const FrameUnit& u : fs.units) {
    begin.push_back(u.pixel_offset);
    counts.push_back(u.patch_rows);
  }
  const auto lopt = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor begins = at::tensor(begin, at::kLong).to(device);
  const at::Tensor sizes = at::tensor(counts, at::kLong).to(device);
  const at::Tensor row_in_unit = at::arange(fs.total_patch_rows, lopt)
                                     .sub(begins.repeat_interleave(sizes));
  std::vector<LaneSums> out(fs.units.size(), LaneSums{0, 0});
  for (size_t l = 0; l < kLanes.size(); ++l) {
    const Lane& k = kLanes[l];
    // Each row's sum mixed with its index in the unit, then the unit's sum
    // by the wrapping prefix sum: exact modulo 2^64.
    const at::Tensor mixed = mix_rows(
        at::cat(parts[l]).add(row_in_unit.mul(as_signed(k.row))), k.mix);
    const at::Tensor prefix = at::cat({at::zeros({1}, lopt), mixed.cumsum(0)});
    const at::Tensor lane = prefix.index_select(0, begins.add(sizes))
                                .sub(prefix.index_select(0, begins))
                                .cpu();
    const int64_t* v = lane.data_ptr<int64_t>();
    for (size_t u = 0; u < out.size(); ++u) {
      out[u][l] = static_cast<uint64_t>(v[u]);
    }
  }
  return out;
}

std::vector<LaneSums> unit_lane_sums_cpu(
    const at::Tensor& pixels, const FrameSet& fs) {
  check_element_size(pixels);
  FRAMESHARD_CHECK(
      pixels.device().is_cpu(),
      "frame_keys",
      "expected CPU pixel_values for the one-pass hash, got ",
      pixels.device());
  const at::Tensor x = pixels.contiguous();
  const int64_t features = x.size(1);
  std::array<std::vector<uint64_t>, 2> weights;
  std::array<std::vector<uint64_t>, 2> sums;
  for (size_t l = 0; l < kLanes.size(); ++l) {
    weights[l] = column_weights(features, kLanes[l].column);
    sums[l].assign(static_cast<size_t>(x.size(0)), 0);
  }
  switch (x.element_size()) {
    case 1:
      all_row_sums<uint8_t>(x, weights, sums);
      break;
    case 2:
      all_row_sums<int16_t>(x, weights, sums);
      break;
    case 4:
      all_row_sums<int32_t>(x, weights, sums);
      break;
    default:
      all_row_sums<int64_t>(x, weights, sums);
      break;
  }
  return unit_sums(sums, fs);
}

}  // namespace internal
}  // namespace frameshard
