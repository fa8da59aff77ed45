// The consensus step of frameshard::encode (runtime/consensus.h): one
// fixed-size record per rank in one equal-size all-gather, then the same
// checks over the same records on every rank.

#include "runtime/consensus.h"

#include "runtime/collectives.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

namespace frameshard {
namespace internal {
namespace {

constexpr int64_t kMagic = 0x46534e5343303032;  // "FSNSC002"
enum Word : int64_t {
  kWMagic = 0,
  kWOk,
  kWFingerprint,
  kWPath,
  kWRows,
  kWDtype,
  kWOutputs,
  kWWidthsHash,
  kWTotalWidth,
  kWRequiresGrad,
  kWGradMode,
  kWGridRows,  // -1: no grid
  kWGridHash,
  kWWidths,  // kConsensusListedWidths entries
  kWMessageLength = kWWidths + kConsensusListedWidths,
  kWMessage,  // kConsensusMessageBytes bytes
  kWords = kWMessage + kConsensusMessageBytes / 8,
};
static_assert(kConsensusMessageBytes % 8 == 0, "message packs into words");

int64_t widths_hash(const std::vector<int64_t>& widths) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
  for (int64_t w : widths) {
    h ^= static_cast<uint64_t>(w);
    h *= 1099511628211ull;
  }
  h ^= widths.size();
  h *= 1099511628211ull;
  return as_word(h);
}

std::vector<int64_t> pack(const ConsensusRecord& r) {
  std::vector<int64_t> w(kWords, 0);
  w[kWMagic] = kMagic;
  w[kWOk] = r.ok ? 1 : 0;
  w[kWFingerprint] = as_word(r.fingerprint);
  w[kWPath] = r.path;
  w[kWRows] = r.rows;
  w[kWDtype] = r.dtype;
  w[kWOutputs] = static_cast<int64_t>(r.widths.size());
  w[kWWidthsHash] = widths_hash(r.widths);
  int64_t total = 0;
  for (int64_t x : r.widths) {
    total += x;
  }
  w[kWTotalWidth] = total;
  w[kWRequiresGrad] = r.requires_grad ? 1 : 0;
  w[kWGradMode] = r.grad_mode ? 1 : 0;
  w[kWGridRows] = r.has_grid ? static_cast<int64_t>(r.grid.size()) : -1;
  const uint64_t gh = r.has_grid ? grid_hash(r.grid) : 0;
  w[kWGridHash] = as_word(gh);
  for (int64_t i = 0; i < kConsensusListedWidths; ++i) {
    w[kWWidths + i] =
        i < static_cast<int64_t>(r.widths.size()) ? r.widths[i] : -1;
  }
  pack_message(r.error, &w[kWMessageLength]);
  return w;
}

struct Unpacked {
  ConsensusRecord record;
  int64_t magic = 0;
  int64_t outputs = 0;
  int64_t widths_hash = 0;
  int64_t total_width = 0;
  int64_t grid_rows = -1;
  int64_t grid_hash = 0;
};

Unpacked unpack(const int64_t* w) {
  Unpacked u;
  u.magic = w[kWMagic];
  u.record.ok = w[kWOk] != 0;
  u.record.fingerprint = as_hash(w[kWFingerprint]);
  u.record.path = w[kWPath];
  u.record.rows = w[kWRows];
  u.record.dtype = w[kWDtype];
  u.outputs = w[kWOutputs];
  u.widths_hash = w[kWWidthsHash];
  u.total_width = w[kWTotalWidth];
  u.record.requires_grad = w[kWRequiresGrad] != 0;
  u.record.grad_mode = w[kWGradMode] != 0;
  u.grid_rows = w[kWGridRows];
  u.grid_hash = w[kWGridHash];
  const int64_t listed =
      std::min(std::max<int64_t>(u.outputs, 0), kConsensusListedWidths);
  for (int64_t i = 0; i < listed; ++i) {
    u.record.widths.push_back(w[kWWidths + i]);
  }
  u.record.error = unpack_message(&w[kWMessageLength]);
  return u;
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

std::string path_name(int64_t p) {
  return p == 0 ? "sharded" : p == 1 ? "replicated" : "no";
}

std::string dtype_name(int64_t d) {
  if (d < 0 || d >= static_cast<int64_t>(c10::ScalarType::NumOptions)) {
    return "none";
  }
  return c10::toString(static_cast<c10::ScalarType>(d));
}

std::string widths_text(const Unpacked& u) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < u.record.widths.size(); ++i) {
    os << (i ? ", " : "") << u.record.widths[i];
  }
  if (u.outputs > kConsensusListedWidths) {
    os << ", ... (total " << u.total_width << ")";
  }
  os << "]";
  return os.str();
}

/// The first rank whose grid differs from rank 0's (both sent one), or -1.
int first_grid_peer(const std::vector<Unpacked>& all) {
  if (all[0].grid_rows < 0) {
    return -1;
  }
  for (size_t q = 1; q < all.size(); ++q) {
    if (all[q].grid_rows >= 0 && (all[q].grid_rows != all[0].grid_rows ||
                                  all[q].grid_hash != all[0].grid_hash)) {
      return static_cast<int>(q);
    }
  }
  return -1;
}

/// Step 1 (collective): every rank's record, checked for this format.
std::vector<Unpacked> gather_records(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn,
    const std::string& prefix) {
  const auto words = pack(mine);
  at::Tensor buffer =
      at::tensor(words, at::TensorOptions().dtype(at::kLong)).to(device);
  auto gathered = allgather_equal(group, buffer, timeout, fn);
  std::vector<Unpacked> all;
  for (const auto& t : gathered) {
    at::Tensor cpu = t.cpu().contiguous();
    TORCH_CHECK(
        cpu.numel() == kWords,
        prefix,
        "consensus record of ",
        cpu.numel(),
        " words, expected ",
        static_cast<int64_t>(kWords));
    all.push_back(unpack(cpu.data_ptr<int64_t>()));
  }
  for (size_t q = 0; q < all.size(); ++q) {
    TORCH_CHECK(
        all[q].magic == kMagic,
        prefix,
        "rank ",
        q,
        " sent a consensus record of another format (mixed frameshard "
        "builds?)");
  }
  return all;
}

/// Step 2: any rank's failure, the same text on every rank.
void check_failures(
    const std::vector<Unpacked>& all, const std::string& prefix) {
  std::vector<int> failed;
  for (size_t q = 0; q < all.size(); ++q) {
    if (!all[q].record.ok) {
      failed.push_back(static_cast<int>(q));
    }
  }
  if (!failed.empty()) {
    TORCH_CHECK(
        false, prefix, failures_text(failed, all[failed[0]].record.error));
  }
}

/// Step 3 (collective when the grids differ: every rank sees that alike):
/// different grids make different plans; naming the row says more than
/// the fingerprints or paths of step 4 would.
void check_grids(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    const std::vector<Unpacked>& all,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn,
    const std::string& prefix) {
  const int grid_peer = first_grid_peer(all);
  if (grid_peer <= 0) {
    return;
  }
  std::vector<int64_t> grid_rows;
  for (const Unpacked& u : all) {
    grid_rows.push_back(u.grid_rows);
  }
  const std::string text = exchange_grid_difference(
      group, mine, grid_rows, grid_peer, device, timeout, fn);
  TORCH_CHECK(false, prefix, "ranks disagree on the plan: ", text);
}

/// Step 4: the path and the fingerprint of `subject`, against rank 0's.
void check_plans(
    const std::vector<Unpacked>& all,
    const std::string& prefix,
    const char* subject) {
  const ConsensusRecord& a = all[0].record;
  for (size_t q = 1; q < all.size(); ++q) {
    const ConsensusRecord& b = all[q].record;
    TORCH_CHECK(
        a.path == b.path,
        prefix,
        "ranks disagree on the plan: rank 0 takes ",
        "the ",
        path_name(a.path),
        " path, rank ",
        q,
        " the ",
        path_name(b.path),
        " path (different grid_thw or options?)");
    TORCH_CHECK(
        a.fingerprint == b.fingerprint,
        prefix,
        "ranks disagree on the ",
        subject,
        " fingerprint: rank 0 has ",
        hex(a.fingerprint),
        ", rank ",
        q,
        " has ",
        hex(b.fingerprint),
        std::string(subject) == "plan"
            ? " (different grid_thw, options or dedup keys?)"
            : "");
  }
}

/// Step 5, for rank q against rank `ref` (both ran a tower): the output
/// dtype, count and widths.
void check_outputs_of(
    const Unpacked& a,
    int ref,
    const Unpacked& b,
    size_t q,
    const std::string& prefix) {
  TORCH_CHECK(
      a.record.dtype == b.record.dtype,
      prefix,
      "ranks disagree on the output dtype: rank ",
      ref,
      " has ",
      dtype_name(a.record.dtype),
      ", rank ",
      q,
      " has ",
      dtype_name(b.record.dtype));
  TORCH_CHECK(
      a.outputs == b.outputs,
      prefix,
      "ranks disagree on the number of tower outputs: rank ",
      ref,
      " has ",
      a.outputs,
      ", rank ",
      q,
      " has ",
      b.outputs);
  TORCH_CHECK(
      a.widths_hash == b.widths_hash && a.total_width == b.total_width &&
          a.record.widths == b.record.widths,
      prefix,
      "ranks disagree on the output widths: rank ",
      ref,
      " has ",
      widths_text(a),
      ", rank ",
      q,
      " has ",
      widths_text(b));
}

/// Step 5: grad mode against rank 0's, and the outputs against those of
/// the first rank that has some (rank 0 but in encode_mesh's replicated
/// path, where a text-only replica runs no tower).
void check_outputs(
    const std::vector<Unpacked>& all, const std::string& prefix) {
  int ref = 0;
  while (ref + 1 < static_cast<int>(all.size()) && all[ref].record.dtype < 0) {
    ++ref;
  }
  for (size_t q = 1; q < all.size(); ++q) {
    TORCH_CHECK(
        all[0].record.grad_mode == all[q].record.grad_mode,
        prefix,
        "ranks disagree on grad mode: rank 0 has it ",
        all[0].record.grad_mode ? "enabled" : "disabled",
        ", rank ",
        q,
        " has it ",
        all[q].record.grad_mode ? "enabled" : "disabled",
        " (a NoGradGuard on some ranks only would leave the others waiting "
        "in backward)");
    if (static_cast<int>(q) <= ref || all[q].record.dtype < 0) {
      continue;  // ran no tower (see run_consensus in consensus.h)
    }
    check_outputs_of(all[ref], ref, all[q], q, prefix);
  }
}

/// Step 6: each rank's row count against the plan's.
void check_rows(
    const std::vector<Unpacked>& all,
    const std::vector<int64_t>& expected_rows,
    const std::string& prefix) {
  TORCH_INTERNAL_ASSERT(expected_rows.size() == all.size());
  for (size_t q = 0; q < all.size(); ++q) {
    TORCH_CHECK(
        all[q].record.rows == expected_rows[q],
        prefix,
        "rank ",
        q,
        " contributes ",
        all[q].record.rows,
        " rows, the plan expects ",
        expected_rows[q]);
  }
}

}  // namespace

int64_t as_word(uint64_t v) {
  int64_t w = 0;
  std::memcpy(&w, &v, sizeof(w));
  return w;
}

uint64_t as_hash(int64_t w) {
  uint64_t v = 0;
  std::memcpy(&v, &w, sizeof(v));
  return v;
}

void pack_message(const std::string& text, int64_t* w) {
  const auto len = std::min<int64_t>(
      static_cast<int64_t>(text.size()), kConsensusMessageBytes);
  w[0] = len;
  std::memcpy(&w[1], text.data(), static_cast<size_t>(len));
}

std::string unpack_message(const int64_t* w) {
  const int64_t len =
      std::min(std::max<int64_t>(w[0], 0), kConsensusMessageBytes);
  return std::string(
      reinterpret_cast<const char*>(&w[1]), static_cast<size_t>(len));
}

std::string failures_text(
    const std::vector<int>& failed, const std::string& first_error) {
  std::ostringstream os;
  if (failed.size() == 1) {
    os << "rank " << failed[0] << " failed " << first_error;
  } else {
    os << "ranks ";
    for (size_t i = 0; i < failed.size(); ++i) {
      os << (i ? ", " : "") << failed[i];
    }
    os << " failed; rank " << failed[0] << " failed " << first_error;
  }
  return os.str();
}

std::vector<ConsensusRecord> run_consensus(
    const ProcessGroupPtr& group,
    const ConsensusRecord& mine,
    const std::vector<int64_t>& expected_rows,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn,
    const char* subject) {
  // Every rank runs the same steps over the same records: a step raises on
  // every rank alike or on none, so the collective of step 3 has all ranks.
  const std::string prefix = rank_prefix(fn, group);
  std::vector<Unpacked> all =
      gather_records(group, mine, device, timeout, fn, prefix);
  check_failures(all, prefix);
  check_grids(group, mine, all, device, timeout, fn, prefix);
  check_plans(all, prefix, subject);
  check_outputs(all, prefix);
  check_rows(all, expected_rows, prefix);
  std::vector<ConsensusRecord> records;
  for (auto& u : all) {
    records.push_back(std::move(u.record));
  }
  return records;
}

}  // namespace internal
}  // namespace frameshard
