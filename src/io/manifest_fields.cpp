// The grid_thw and text_tokens fields of a manifest line (manifest_fields.h):
// the one reading the training and the dataset manifest share.
#include "io/manifest_fields.h"

#include <frameshard/error.h>

#include "io/json_text.h"

#include <algorithm>

namespace frameshard {
namespace json_detail {

std::string manifest_value_text(const nlohmann::json& v) {
  // Only a short list of numbers is written out by hand; deeper, longer or
  // other values go through the bounded core excerpt, so a hostile value
  // never makes a huge or deeply recursive message.
  const bool short_numbers =
      v.is_array() && v.size() <= 8 &&
      std::all_of(v.begin(), v.end(), [](const nlohmann::json& x) {
        return x.is_number();
      });
  if (!short_numbers) {
    return json_excerpt(v);
  }
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    out += (i ? ", " : "") + v[i].dump();
  }
  return out + "]";
}

std::vector<GridThw> read_grid_thw(
    const nlohmann::json& v, int64_t merge_size, const LineRef& at) {
  // An empty list is a text-only sample: data sets mix them with media
  // samples, and data parallelism must survive a replica whose batch holds
  // no media (runtime/mesh_encode.h).
  if (!v.is_array()) {
    line_error(at, "grid_thw", kGridThwExpectation, manifest_value_text(v));
  }
  const int64_t m = merge_size;
  const std::string row_rule =
      "[t, h, w] with t >= 1 and h and w positive multiples of " +
      std::to_string(m) + " (each at most " +
      std::to_string(kMaxManifestEntry) + ")";
  std::vector<GridThw> grid;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& row = v[i];
    bool ok = row.is_array() && row.size() == 3;
    for (std::size_t j = 0; ok && j < 3; ++j) {
      ok = is_manifest_count(row[j]);
    }
    GridThw g;
    if (ok) {
      g = {row[0].get<int64_t>(), row[1].get<int64_t>(), row[2].get<int64_t>()};
      ok = g.t >= 1 && g.h >= m && g.w >= m && g.h % m == 0 && g.w % m == 0;
    }
    if (!ok) {
      line_error(
          at,
          "grid_thw[" + std::to_string(i) + "]",
          row_rule,
          manifest_value_text(row));
    }
    grid.push_back(g);
  }
  return grid;
}

std::vector<int64_t> read_text_tokens(
    const nlohmann::json& v, std::size_t media, const LineRef& at) {
  const std::size_t runs = media + 1;
  if (is_manifest_count(v)) {
    const auto total = v.get<int64_t>();
    const auto k = static_cast<int64_t>(runs);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < k; ++i) {
      out.push_back(total / k + (i < total % k ? 1 : 0));
    }
    return out;
  }
  bool ok = v.is_array() && v.size() == runs;
  std::vector<int64_t> out;
  for (std::size_t i = 0; ok && i < runs; ++i) {
    ok = is_manifest_count(v[i]);
    out.push_back(ok ? v[i].get<int64_t>() : 0);
  }
  if (!ok) {
    line_error(
        at,
        "text_tokens",
        "a non-negative integer or a list of " + std::to_string(runs) +
            " non-negative integers (text before each of the " +
            std::to_string(media) + " media and at the end)",
        manifest_value_text(v));
  }
  return out;
}

}  // namespace json_detail
}  // namespace frameshard
