#include "runtime/rendezvous.h"

#include <frameshard/error.h>

#include "tower/check.h"

#include <c10/util/Exception.h>

#include <exception>
#include <filesystem>
#include <thread>
#include <vector>

namespace frameshard {
namespace internal {
namespace {

constexpr const char* kGroupSizeKey = "frameshard/group_size";

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace

void agree_on_group_size(
    const StorePtr& store, int rank, int size, const char* fn) {
  const std::vector<uint8_t> mine = bytes_of(std::to_string(size));
  // Sets the key when absent; either way returns what it holds.
  const std::vector<uint8_t> first = store->compareSet(kGroupSizeKey, {}, mine);
  TORCH_CHECK(
      first == mine,
      detail::error_prefix(fn, rank, size),
      "expected every rank to form a group of the same size, got ",
      size,
      " here and ",
      std::string(first.begin(), first.end()),
      " on the first rank to join the store");
}

void rethrow_rendezvous_failure(
    const char* fn,
    int rank,
    int size,
    const std::string& where,
    std::chrono::milliseconds timeout) {
  const std::string what = detail::exception_text(std::current_exception());
  // Our own errors (the size check) are already clear.
  if (what.rfind("frameshard::", 0) == 0) {
    throw;
  }
  TORCH_CHECK(
      false,
      detail::error_prefix(fn, rank, size),
      "expected all ",
      size,
      " ranks to join through ",
      where,
      " within ",
      timeout.count(),
      " ms (a rank that did not start or died, a store that went away, or "
      "ranks that disagree on the address), got: ",
      detail::excerpt(what));
}

void remove_store_when_created(
    const std::string& path, std::chrono::milliseconds timeout) {
  namespace fs = std::filesystem;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::error_code ec;
  while (!fs::exists(path, ec) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Let the peer that created it write its keys first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fs::remove(path, ec);
}

}  // namespace internal
}  // namespace frameshard
