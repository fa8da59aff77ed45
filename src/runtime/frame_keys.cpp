// Content keys of frame units (frameshard/runtime/frame_keys.h).
#include <frameshard/error.h>
#include <frameshard/runtime/frame_keys.h>
#include <frameshard/tower.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace frameshard {

namespace {

constexpr int64_t kLow29 = (int64_t{1} << 35) - 1;  // v >>> 29, logical
constexpr int64_t kLow32 = (int64_t{1} << 32) - 1;  // v >>> 32, logical

struct Lane {
  int64_t column;  // seeds the lane's per-column weights
  int64_t row;     // multiplies the row's index inside its unit
  int64_t mix;     // the finaliser's multiplier
};

// Elements of one chunk's int64 copy (32 MiB).
constexpr int64_t kChunkElements = int64_t{1} << 22;

// Two lanes of odd 64-bit constants (splitmix64 / murmur3 finalisers').
constexpr std::array<Lane, 2> kLanes{{
    {static_cast<int64_t>(0xbf58476d1ce4e5b9ULL),
     static_cast<int64_t>(0x94d049bb133111ebULL),
     static_cast<int64_t>(0xff51afd7ed558ccdULL)},
    {static_cast<int64_t>(0x2545f4914f6cdd1dULL),
     static_cast<int64_t>(0xd6e8feb86659fd93ULL),
     static_cast<int64_t>(0x87c37b91114253d5ULL)},
}};

// A 64-bit mix of every element (wrapping multiply, logical shifts).
at::Tensor mix(at::Tensor v, int64_t k) {
  v = v.bitwise_xor(v.bitwise_right_shift(29).bitwise_and(kLow29));
  v = v.mul(k);
  return v.bitwise_xor(v.bitwise_right_shift(32).bitwise_and(kLow32));
}

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One lane's weight of every column: odd pseudo-random 64-bit words, so a
// row's weighted sum modulo 2^64 changes with any single element (an odd
// weight times a non-zero difference below 2^64 is never 0 mod 2^64).
at::Tensor column_weights(int64_t features, int64_t seed) {
  std::vector<int64_t> w(static_cast<size_t>(features));
  for (int64_t c = 0; c < features; ++c) {
    w[static_cast<size_t>(c)] = static_cast<int64_t>(
        mix64(static_cast<uint64_t>(seed) + static_cast<uint64_t>(c)) | 1U);
  }
  return at::tensor(w, at::kLong);
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
    case 8:
      return x.view(at::kLong);
    default:
      detail::fail(
          "frame_keys",
          "expected pixel_values with 1-, 2-, 4- or 8-byte elements, got ",
          x.element_size(),
          "-byte ",
          x.scalar_type());
  }
}

}  // namespace

std::vector<UnitKey> frame_keys(
    const at::Tensor& pixel_values,
    const at::Tensor& grid_thw,
    const MediaLayout& layout) {
  FRAMESHARD_CHECK(
      pixel_values.defined() && pixel_values.dim() == 2,
      "frame_keys",
      "expected pixel_values to be a 2-D [patch_rows, features] tensor, got ",
      pixel_values.defined() ? pixel_values.dim() : -1,
      " dims");
  const FrameSet fs = expand_frames(grid_from_tensor(grid_thw), layout);
  check_pixel_rows(fs, pixel_values.size(0));
  std::vector<UnitKey> keys(fs.units.size());
  if (fs.units.empty()) {
    return keys;
  }
  const auto device = pixel_values.device();
  const auto lopt = at::TensorOptions().dtype(at::kLong).device(device);
  const int64_t features = pixel_values.size(1);
  std::array<at::Tensor, 2> weights;
  for (size_t l = 0; l < kLanes.size(); ++l) {
    weights[l] = column_weights(features, kLanes[l].column).to(device);
  }
  // Row sums, a chunk of rows at a time (the int64 copy of a chunk is the
  // only temporary as large as the pixels).
  std::array<std::vector<at::Tensor>, 2> sums;
  const int64_t rows = pixel_values.size(0);
  const int64_t chunk =
      std::max<int64_t>(1, kChunkElements / std::max<int64_t>(features, 1));
  for (int64_t r = 0; r < rows; r += chunk) {
    const at::Tensor x =
        integer_view(pixel_values.narrow(0, r, std::min(chunk, rows - r)));
    for (size_t l = 0; l < kLanes.size(); ++l) {
      sums[l].push_back(x.mul(weights[l]).sum(1));
    }
  }
  std::vector<int64_t> begin;
  std::vector<int64_t> counts;
  for (const FrameUnit& u : fs.units) {
    begin.push_back(u.pixel_offset);
    counts.push_back(u.patch_rows);
  }
  const at::Tensor begins = at::tensor(begin, at::kLong).to(device);
  const at::Tensor sizes = at::tensor(counts, at::kLong).to(device);
  const at::Tensor row_in_unit = at::arange(fs.total_patch_rows, lopt)
                                     .sub(begins.repeat_interleave(sizes));
  std::array<at::Tensor, 2> lanes;
  for (size_t l = 0; l < kLanes.size(); ++l) {
    const Lane& k = kLanes[l];
    // Each row's sum mixed with its index in the unit, then the unit's sum
    // by the wrapping prefix sum: exact modulo 2^64.
    const at::Tensor mixed =
        mix(at::cat(sums[l]).add(row_in_unit.mul(k.row)), k.mix);
    const at::Tensor prefix = at::cat({at::zeros({1}, lopt), mixed.cumsum(0)});
    lanes[l] = prefix.index_select(0, begins.add(sizes))
                   .sub(prefix.index_select(0, begins))
                   .cpu();
  }
  const uint64_t shape_salt = mix64(
      static_cast<uint64_t>(features) * 0x100 +
      static_cast<uint64_t>(pixel_values.scalar_type()));
  const int64_t* hi = lanes[0].data_ptr<int64_t>();
  const int64_t* lo = lanes[1].data_ptr<int64_t>();
  for (size_t u = 0; u < fs.units.size(); ++u) {
    const uint64_t shape = mix64(
        shape_salt ^ mix64(
                         static_cast<uint64_t>(fs.units[u].h) << 32 |
                         static_cast<uint64_t>(fs.units[u].w)));
    keys[u] = {
        mix64(static_cast<uint64_t>(hi[u]) ^ shape),
        mix64(static_cast<uint64_t>(lo[u]) + shape)};
  }
  return keys;
}

}  // namespace frameshard
