// File: tests/testing/run_ranks.h
//
// The multi-rank test harness: `world` ranks as threads of this process, each
// with its own c10d::ProcessGroupGloo on loopback over one fresh shared
// HashStore (or a FileStore in a temporary directory), with a short
// collective timeout (PyTorch's ProcessGroupGlooTest does the same).
//
// Usage:
//   using frameshard::ProcessGroupPtr;
//   frameshard::testing::run_ranks(3, [&](int rank, ProcessGroupPtr pg) {
//     at::Tensor full = frameshard::all_gather_rows(local, counts, pg);
//     results[rank] = full;   // a vector sized `world`: one slot per rank
//   });
//   // rethrows the first rank failure in this thread, prefixed "rank r: ".
//
//   auto outcomes = frameshard::testing::run_ranks_collect(3, fn);
//   // one RankOutcome per rank (ok / error text): assert that EVERY rank
//   // raised the same error.
//
// Also here: CountingGroup (a forwarding process group that counts the
// collectives a call issues) and allreduce_sum (sum a tensor over ranks).
//
// A rank that never finishes (a hung collective) is a test failure, not a
// hung test: after `hang_limit` the harness prints which ranks are still
// running and ends the process with exit code 3.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace frameshard {
namespace testing {

using RankFn = std::function<void(int rank, ProcessGroupPtr pg)>;

struct RunRanksOptions {
  /// Collective timeout of every rank's group (and the store's timeout).
  std::chrono::milliseconds timeout{std::chrono::seconds(5)};
  /// Gloo worker threads per group.
  int gloo_threads = 1;
  /// Rendezvous through a FileStore in a fresh temporary directory instead
  /// of an in-memory HashStore.
  bool file_store = false;
  /// A rank still running after this long is reported as a hang and the
  /// process exits (a test must fail, never hang).
  std::chrono::milliseconds hang_limit{std::chrono::seconds(90)};
};

/// What one rank did: ok, or the text of what it threw.
struct RankOutcome {
  bool ok = true;
  std::string error;  // c10::Error text without the C++ backtrace
  /// From the start of the rank's thread (before its group exists) until
  /// `fn` returned or threw.
  std::chrono::milliseconds elapsed{0};
};

/// The message of an exception, without c10's backtrace.
inline std::string exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// "frameshard::encode: [rank 1/3] rank 2 failed: x" -> "rank 2 failed: x":
/// the part after the first "] " (the rank prefix differs between ranks by
/// design; the content after it must not). Unchanged if there is no prefix.
inline std::string strip_rank_prefix(const std::string& message) {
  const auto open = message.find("[rank ");
  if (open == std::string::npos) {
    return message;
  }
  const auto close = message.find("] ", open);
  if (close == std::string::npos) {
    return message;
  }
  return message.substr(close + 2);
}

/// A unique empty temporary directory, removed by the destructor.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    namespace fs = std::filesystem;
    std::random_device rd;
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::ostringstream name;
      name << "frameshard_test_" << std::hex << rd() << rd();
      auto candidate = fs::temp_directory_path() / name.str();
      std::error_code ec;
      if (fs::create_directory(candidate, ec)) {
        path_ = candidate.string();
        return;
      }
    }
    throw std::runtime_error("TemporaryDirectory: cannot create a directory");
  }
  ~TemporaryDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::string& path() const {
    return path_;
  }

 private:
  std::string path_;
};

/// A process group that forwards the collectives the runtime uses
/// (allgather, alltoall_base, allreduce, barrier) to `inner` and counts
/// them, so tests can assert how many collectives a call issued (e.g. that
/// encode gathers several outputs in ONE alltoall, or that a check raised
/// before any collective). Any other collective raises (the base class).
class CountingGroup : public c10d::ProcessGroup {
 public:
  explicit CountingGroup(ProcessGroupPtr inner)
      : c10d::ProcessGroup(inner->getRank(), inner->getSize()),
        inner_(std::move(inner)) {}
  const std::string getBackendName() const override {
    return "counting(" + inner_->getBackendName() + ")";
  }
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    ++allgathers;
    return inner_->allgather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& output_splits,
      std::vector<int64_t>& input_splits,
      const c10d::AllToAllOptions& opts) override {
    ++alltoalls;
    return inner_->alltoall_base(
        output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override {
    ++allreduces;
    return inner_->allreduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override {
    return inner_->barrier(opts);
  }
  int total() const {
    return allgathers + alltoalls + allreduces;
  }

  int allgathers = 0;
  int alltoalls = 0;
  int allreduces = 0;

 private:
  ProcessGroupPtr inner_;
};

/// Sum over the group's ranks of `t` (in t's dtype), waited for; tests use
/// it to total per-rank losses and gradients.
inline at::Tensor allreduce_sum(
    const ProcessGroupPtr& pg, const at::Tensor& t) {
  std::vector<at::Tensor> v{t.detach().clone().contiguous()};
  pg->allreduce(v)->wait();
  return v[0];
}

/// Runs `fn(rank, group)` on `world` threads and returns every rank's
/// outcome (rank failures, including group construction, are collected, not
/// thrown). The group is destroyed on its rank's thread when `fn` returns, so
/// a rank that returns early behaves like a peer that exited.
inline std::vector<RankOutcome> run_ranks_collect(
    int world, const RankFn& fn, const RunRanksOptions& options = {}) {
  if (world < 1) {
    throw std::invalid_argument("run_ranks: expected world >= 1");
  }
  std::unique_ptr<TemporaryDirectory> dir;
  StorePtr store;
  if (options.file_store) {
    dir = std::make_unique<TemporaryDirectory>();
    // A FileStore object per rank, like separate processes would have.
  } else {
    store = c10::make_intrusive<c10d::HashStore>();
    store->setTimeout(options.timeout);
  }

  std::vector<RankOutcome> outcomes(world);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<bool> done(world, false);
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      const auto start = std::chrono::steady_clock::now();
      ProcessGroupPtr pg;
      try {
        GroupOptions go;
        go.timeout = options.timeout;
        go.threads = options.gloo_threads;
        if (options.file_store) {
          pg = make_file_store_group(dir->path() + "/store", rank, world, go);
        } else {
          pg = make_gloo_group(store, rank, world, go);
        }
        // Every group finishes connecting before any rank runs `fn`: a rank
        // that raises at once and drops its group must not cut a peer's
        // handshake short ("Connection closed by peer" instead of the
        // error under test).
        pg->barrier()->wait();
        fn(rank, pg);
      } catch (...) {
        outcomes[rank].ok = false;
        outcomes[rank].error = exception_text(std::current_exception());
      }
      outcomes[rank].elapsed =
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - start);
      // Destroyed here, on the rank's thread (after `elapsed`: a group whose
      // collective failed may wait for Gloo's own timeout to wind down).
      pg.reset();
      std::lock_guard<std::mutex> lock(mu);
      done[rank] = true;
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(
            lock, options.hang_limit, [&] { return finished == world; })) {
      std::ostringstream os;
      os << "run_ranks: ranks still running after "
         << options.hang_limit.count() << " ms (a collective hangs):";
      for (int r = 0; r < world; ++r) {
        if (!done[r]) {
          os << " " << r;
        }
      }
      std::fprintf(stderr, "%s\n", os.str().c_str());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
  for (auto& t : threads) {
    t.join();
  }
  return outcomes;
}

/// Runs `fn` on `world` ranks and rethrows the first failing rank's error in
/// this thread as std::runtime_error("rank r: <message>").
inline void run_ranks(
    int world, const RankFn& fn, const RunRanksOptions& options = {}) {
  const auto outcomes = run_ranks_collect(world, fn, options);
  std::ostringstream os;
  bool failed = false;
  for (int r = 0; r < world; ++r) {
    if (!outcomes[r].ok) {
      os << (failed ? "\n" : "") << "rank " << r << ": " << outcomes[r].error;
      failed = true;
    }
  }
  if (failed) {
    throw std::runtime_error(os.str());
  }
}

}  // namespace testing
}  // namespace frameshard
