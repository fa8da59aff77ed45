// Gloo (and NCCL) process groups built in C++ (runtime/c10d_compat.h): the
// one source that includes c10d's ProcessGroupGloo.hpp, and so gloo's own
// headers (Debian's libgloo-dev; PyPI's torch does not ship them). Compiled
// when FRAMESHARD_GLOO_GROUPS is ON; no_gloo_groups.cpp otherwise.
#include "runtime/c10d_compat.h"

#include <frameshard/error.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef FRAMESHARD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace frameshard {
namespace internal {
namespace {

using BackendType = c10d::ProcessGroup::BackendType;

c10::intrusive_ptr<c10d::Backend> gloo_backend(
    const StorePtr& store, int rank, int size, const GroupOptions& options) {
  auto opts = c10d::ProcessGroupGloo::Options::create(options.timeout);
  opts->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname));
  opts->threads = options.threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

}  // namespace

ProcessGroupPtr gloo_process_group(
    const StorePtr& store, int rank, int size, const GroupOptions& options) {
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  auto backend = gloo_backend(store, rank, size, options);
  pg->setDefaultBackend(BackendType::GLOO);
  pg->setBackend(c10::DeviceType::CPU, BackendType::GLOO, backend);
  pg->setBackend(c10::DeviceType::CUDA, BackendType::GLOO, backend);
  return pg;
}

#ifdef FRAMESHARD_WITH_NCCL
ProcessGroupPtr nccl_process_group(
    const StorePtr& store, int rank, int size, const GroupOptions& options) {
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = options.timeout;
  // The two backends rendezvous under different store prefixes.
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank, size, opts);
  auto gloo = gloo_backend(
      c10::make_intrusive<c10d::PrefixStore>("gloo", store),
      rank,
      size,
      options);
  pg->setDefaultBackend(BackendType::NCCL);
  pg->setBackend(c10::DeviceType::CUDA, BackendType::NCCL, nccl);
  pg->setBackend(c10::DeviceType::CPU, BackendType::GLOO, gloo);
  return pg;
}
#else
ProcessGroupPtr nccl_process_group(
    const StorePtr& /*store*/,
    int /*rank*/,
    int /*size*/,
    const GroupOptions& /*options*/) {
  FRAMESHARD_CHECK(
      false,
      "make_nccl_group",
      "expected a build with the NCCL path (FRAMESHARD_WITH_NCCL), got one "
      "without it");
  return {};
}
#endif

}  // namespace internal
}  // namespace frameshard
