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

#include "runtime/c10d_compat.h"
#include "tower/check.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
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
  /// "cpu": Gloo, CPU tensors. "cuda": CUDA tensors, rank r on device r with
  /// NCCL when there are at least `world` devices (and the build has NCCL);
  /// otherwise every rank on device 0 with Gloo (NCCL refuses two ranks on
  /// one device). cuda_ranks_use_nccl(world) says which.
  std::string device = "cpu";
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
/// (allgather, all_to_all_single, allreduce, barrier) to `inner` and counts
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
#if FRAMESHARD_C10D_ALL_TO_ALL_SINGLE
  c10::intrusive_ptr<c10d::Work> all_to_all_single(
#else
  c10::intrusive_ptr<c10d::Work> alltoall_base(
#endif
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& output_splits,
      std::vector<int64_t>& input_splits,
      const c10d::AllToAllOptions& opts) override {
    ++alltoalls;
    return internal::all_to_all_single(
        inner_, output, input, output_splits, input_splits, opts);
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

/// A one-shot thread barrier that gives up after `limit` (a rank that never
/// arrives is then reported by the hang watchdog, not waited for here).
class Rendezvous {
 public:
  Rendezvous(int count, std::chrono::milliseconds limit)
      : remaining_(count), limit_(limit) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--remaining_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait_for(lock, limit_, [&] { return remaining_ <= 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int remaining_;
  std::chrono::milliseconds limit_;
};

/// Number of CUDA devices (0 on a machine without a GPU or driver).
inline int cuda_devices() {
  return static_cast<int>(torch::cuda::device_count());
}

/// A test body's first line where it needs a GPU: SKIPPED, with the reason,
/// on a machine without one (scripts/gpu-check.sh runs them on one).
#define FRAMESHARD_REQUIRE_CUDA()                                   \
  if (::frameshard::testing::cuda_devices() == 0) {                 \
    GTEST_SKIP() << "needs a CUDA device (this machine has none); " \
                    "runs in scripts/gpu-check.sh";                 \
  }

/// Options of CUDA ranks (see RunRanksOptions::device), collectives timing
/// out after 60 s.
inline RunRanksOptions cuda_rank_options() {
  RunRanksOptions o;
  o.device = "cuda";
  o.timeout = std::chrono::seconds(60);
  return o;
}

/// Whether RunRanksOptions{device = "cuda"} gives `world` ranks NCCL.
inline bool cuda_ranks_use_nccl(int world) {
#ifdef FRAMESHARD_WITH_NCCL
  return cuda_devices() >= world;
#else
  (void)world;
  return false;
#endif
}

/// The device a "cuda" rank runs on.
inline c10::Device cuda_rank_device(int rank, int world) {
  return c10::Device(
      c10::kCUDA,
      static_cast<c10::DeviceIndex>(cuda_ranks_use_nccl(world) ? rank : 0));
}

/// A group for CUDA rank `rank` (see RunRanksOptions::device); makes the
/// rank's device current on this thread.
inline ProcessGroupPtr make_cuda_rank_group(
    const StorePtr& store, int rank, int world, const GroupOptions& go) {
  if (cuda_devices() < 1) {
    throw std::runtime_error("run_ranks: device \"cuda\" needs a CUDA device");
  }
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  guard.setDevice(cuda_rank_device(rank, world));
#ifdef FRAMESHARD_WITH_NCCL
  if (cuda_ranks_use_nccl(world)) {
    return make_nccl_group(store, rank, world, go);
  }
#endif
  return make_gloo_group(store, rank, world, go);
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
  Rendezvous built(world, options.hang_limit);
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
        try {
          if (options.device == "cuda") {
            pg = make_cuda_rank_group(store, rank, world, go);
          } else if (options.file_store) {
            pg = make_file_store_group(dir->path() + "/store", rank, world, go);
          } else {
            pg = make_gloo_group(store, rank, world, go);
          }
        } catch (...) {
          built.arrive_and_wait();
          throw;
        }
        // Every rank's group is connected before any rank runs `fn`: a rank
        // that returns at once (e.g. raising before any collective) must not
        // close its sockets while a peer is still connecting (torch 2.x's
        // Gloo connects the full mesh in the constructor).
        built.arrive_and_wait();
        fn(rank, pg);
      } catch (...) {
        outcomes[rank].ok = false;
        outcomes[rank].error = detail::exception_text(std::current_exception());
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
