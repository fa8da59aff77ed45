// agree_values(): the ranks' named integer arguments, compared on every rank
// (frameshard/runtime/agree.h). One fixed-size record per rank (status,
// count, hashes of the names and values, a failure message) in one
// equal-size all-gather; only when the value hashes differ, a second
// all-gather of the values themselves names the argument that differs.
// Both rounds' sizes follow from what every rank already knows, so every
// rank issues the same collectives.
#include <frameshard/runtime/agree.h>

#include <frameshard/error.h>

#include "core/fingerprint.h"
#include "runtime/collectives.h"
#include "runtime/consensus.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

namespace frameshard {
namespace {

constexpr int64_t kAgreeMagic = 0x4653414756303031;  // "FSAGV001"
enum AgreeWord : int64_t {
  kAwMagic = 0,
  kAwOk,
  kAwCount,
  kAwNamesHash,
  kAwValuesHash,
  kAwMessageLength,
  kAwMessage,  // internal::kConsensusMessageBytes bytes
  kAwWords = kAwMessage + internal::kConsensusMessageBytes / 8,
};

int64_t names_hash(const std::vector<std::string>& names) {
  internal::Fingerprint fp;
  fp.add(static_cast<int64_t>(names.size()));
  for (const std::string& n : names) {
    fp.add(static_cast<int64_t>(n.size()));
    for (char ch : n) {
      fp.add(static_cast<unsigned char>(ch));
    }
  }
  return internal::as_word(fp.finish());
}

int64_t values_hash(const std::vector<int64_t>& values) {
  internal::Fingerprint fp;
  fp.add(static_cast<int64_t>(values.size()));
  for (int64_t v : values) {
    fp.add(v);
  }
  return internal::as_word(fp.finish());
}

std::vector<int64_t> agree_record(
    const std::vector<std::string>& names,
    const std::vector<int64_t>& values,
    const std::string& error) {
  std::vector<int64_t> w(kAwWords, 0);
  w[kAwMagic] = kAgreeMagic;
  w[kAwOk] = error.empty() ? 1 : 0;
  w[kAwCount] = static_cast<int64_t>(names.size());
  w[kAwNamesHash] = names_hash(names);
  w[kAwValuesHash] = error.empty() ? values_hash(values) : 0;
  internal::pack_message(error, &w[kAwMessageLength]);
  return w;
}

std::vector<std::vector<int64_t>> gather_words(
    const ProcessGroupPtr& group,
    const std::vector<int64_t>& words,
    c10::Device device,
    std::chrono::milliseconds timeout,
    const char* fn) {
  const at::Tensor buffer =
      at::tensor(words, at::TensorOptions().dtype(at::kLong)).to(device);
  std::vector<std::vector<int64_t>> out;
  for (const at::Tensor& t :
       internal::allgather_equal(group, buffer, timeout, fn)) {
    const at::Tensor cpu = t.cpu().contiguous();
    TORCH_CHECK(
        cpu.numel() == static_cast<int64_t>(words.size()),
        internal::rank_prefix(fn, group),
        "a rank sent ",
        cpu.numel(),
        " words, expected ",
        words.size());
    const int64_t* p = cpu.data_ptr<int64_t>();
    out.emplace_back(p, p + cpu.numel());
  }
  return out;
}

}  // namespace

void agree_values(
    const ProcessGroupPtr& group,
    const std::string& fn,
    const std::vector<std::string>& names,
    const std::vector<int64_t>& values,
    c10::Device device,
    std::chrono::milliseconds timeout) {
  std::string error;
  if (names.size() != values.size()) {
    std::ostringstream os;
    os << "with " << names.size() << " names and " << values.size()
       << " values (expected one value per name)";
    error = os.str();
  }
  if (!group || group->getSize() == 1) {
    FRAMESHARD_CHECK(
        error.empty(),
        fn.c_str(),
        "expected one value per name, got ",
        names.size(),
        " names and ",
        values.size(),
        " values");
    return;
  }
  const char* f = fn.c_str();
  const std::string prefix = internal::rank_prefix(f, group);
  const auto records = gather_words(
      group, agree_record(names, values, error), device, timeout, f);
  const auto world = static_cast<int>(records.size());
  std::vector<int> failed;
  for (int q = 0; q < world; ++q) {
    const auto& r = records[static_cast<size_t>(q)];
    TORCH_CHECK(
        r[kAwMagic] == kAgreeMagic,
        prefix,
        "rank ",
        q,
        " sent an argument record of another format (a different "
        "collective, or mixed frameshard builds?)");
    if (r[kAwOk] == 0) {
      failed.push_back(q);
    }
  }
  if (!failed.empty()) {
    const auto& r = records[static_cast<size_t>(failed[0])];
    const std::string first = internal::unpack_message(&r[kAwMessageLength]);
    TORCH_CHECK(false, prefix, internal::failures_text(failed, first));
  }
  const auto& a = records[0];
  for (int q = 1; q < world; ++q) {
    const auto& b = records[static_cast<size_t>(q)];
    TORCH_CHECK(
        a[kAwCount] == b[kAwCount] && a[kAwNamesHash] == b[kAwNamesHash],
        prefix,
        "ranks pass different argument names: rank 0 passes ",
        a[kAwCount],
        " names, rank ",
        q,
        " passes ",
        b[kAwCount],
        b[kAwCount] == a[kAwCount] ? " different ones" : " names",
        " (a different call, or mixed frameshard versions?)");
  }
  const bool same = std::all_of(
      records.begin() + 1, records.end(), [&](const std::vector<int64_t>& r) {
        return r[kAwValuesHash] == a[kAwValuesHash];
      });
  if (same) {
    return;
  }
  // Every rank saw the differing hashes: all join the second all-gather,
  // of `count` words each (equal on every rank, checked above).
  const auto all = gather_words(group, values, device, timeout, f);
  for (size_t i = 0; i < names.size(); ++i) {
    for (int q = 1; q < world; ++q) {
      const int64_t x = all[0][i];
      const int64_t y = all[static_cast<size_t>(q)][i];
      TORCH_CHECK(
          x == y,
          prefix,
          "ranks disagree on ",
          names[i],
          ": rank 0 has ",
          x,
          ", rank ",
          q,
          " has ",
          y);
    }
  }
  TORCH_CHECK(
      false,
      prefix,
      "ranks disagree on the arguments' hash but not on their values (a "
      "frameshard bug)");
}

}  // namespace frameshard
