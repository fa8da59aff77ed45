// The grid part of encode's consensus (runtime/consensus.h): when the ranks'
// plans differ because their grid_thw do, name the first differing row.
// The fixed-size record carries only each rank's row count and a hash of its
// rows, so naming the row takes one more all-gather, joined by every rank
// because every rank saw the same records.

#include "runtime/consensus.h"

#include "core/fingerprint.h"
#include "runtime/collectives.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

namespace frameshard {
namespace internal {
namespace {

std::string grid_row_text(const GridThw& g) {
  std::ostringstream os;
  os << "(" << g.t << ", " << g.h << ", " << g.w << ")";
  return os.str();
}

}  // namespace

std::string grid_difference(
    int ra,
    const std::vector<GridThw>& a,
    int rb,
    const std::vector<GridThw>& b) {
  std::ostringstream os;
  const size_t common = std::min(a.size(), b.size());
  for (size_t i = 0; i < common; ++i) {
    if (!(a[i] == b[i])) {
      os << "grid_thw row " << i << ": rank " << ra << " has "
         << grid_row_text(a[i]) << ", rank " << rb << " has "
         << grid_row_text(b[i]);
      return os.str();
    }
  }
  if (a.size() != b.size()) {
    os << "grid_thw rows: rank " << ra << " has " << a.size() << ", rank " << rb
       << " has " << b.size();
  }
  return os.str();
}

uint64_t grid_hash(const std::vector<GridThw>& grid) {
  Fingerprint fp;
  fp.add(static_cast<int64_t>(grid.size()));
  for (const GridThw& g : grid) {
    fp.add(g.t);
    fp.add(g.h);
    fp.add(g.w);
  }
  return fp.finish();
}

std::string exchange_grid_difference(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    const std::vector<int64_t>& rows,
    int peer,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn) {
  // Bounded: a grid of a million rows costs no more than kConsensusGridRows
  // in the error path.
  const int64_t sent =
      std::min(*std::max_element(rows.begin(), rows.end()), kConsensusGridRows);
  std::vector<int64_t> words(static_cast<size_t>(3 * sent), -1);
  const auto mine_sent = std::min(static_cast<int64_t>(mine.grid.size()), sent);
  for (int64_t i = 0; i < mine_sent; ++i) {
    const GridThw& g = mine.grid[static_cast<size_t>(i)];
    words[static_cast<size_t>(3 * i)] = g.t;
    words[static_cast<size_t>(3 * i + 1)] = g.h;
    words[static_cast<size_t>(3 * i + 2)] = g.w;
  }
  const at::Tensor buffer =
      at::tensor(words, at::TensorOptions().dtype(at::kLong)).to(device);
  const auto gathered = allgather_equal(group, buffer, timeout, fn);
  const auto grid_of = [&](int q) {
    const at::Tensor cpu = gathered[static_cast<size_t>(q)].cpu().contiguous();
    TORCH_CHECK(
        cpu.numel() == 3 * sent,
        rank_prefix(fn, group),
        "rank ",
        q,
        " sent ",
        cpu.numel(),
        " grid words, expected ",
        3 * sent);
    const int64_t* w = cpu.data_ptr<int64_t>();
    std::vector<GridThw> grid;
    const int64_t n = std::min(rows[static_cast<size_t>(q)], sent);
    for (int64_t i = 0; i < n; ++i) {
      grid.push_back({w[3 * i], w[3 * i + 1], w[3 * i + 2]});
    }
    return grid;
  };
  std::vector<GridThw> a = grid_of(0);
  std::vector<GridThw> b = grid_of(peer);
  // The rows both sent; the counts come from the records (whole grids).
  const size_t common = std::min(a.size(), b.size());
  a.resize(common);
  b.resize(common);
  std::string text = grid_difference(0, a, peer, b);
  if (text.empty() && rows[0] != rows[static_cast<size_t>(peer)]) {
    std::ostringstream os;
    os << "grid_thw rows: rank 0 has " << rows[0] << ", rank " << peer
       << " has " << rows[static_cast<size_t>(peer)];
    text = os.str();
  }
  if (text.empty()) {
    std::ostringstream os;
    os << "grid_thw of rank 0 and rank " << peer << " (" << rows[0]
       << " rows each) differ after their first " << kConsensusGridRows
       << " rows";
    text = os.str();
  }
  return text;
}

}  // namespace internal
}  // namespace frameshard
