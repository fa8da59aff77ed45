// Process-group construction (Gloo; NCCL behind FRAMESHARD_WITH_NCCL), the
// torchrun environment (the mesh arithmetic is mesh.cpp).

#include <frameshard/runtime/process_group.h>

#include "runtime/c10d_compat.h"
#include "runtime/fault.h"
#include "runtime/rendezvous.h"
#include "tower/check.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace frameshard {

namespace {

void check_rank_size(const char* fn, int rank, int size) {
  FRAMESHARD_TORCH_CHECK(size >= 1, fn, "expected size >= 1, got ", size);
  FRAMESHARD_TORCH_CHECK(
      rank >= 0 && rank < size,
      fn,
      "expected rank in [0, ",
      size,
      "), got ",
      rank);
}

/// "gloo" or "nccl" for GroupOptions::backend ("auto" resolved).
std::string resolve_backend(const std::string& backend) {
  const char* fn = "make_group_from_env";
  FRAMESHARD_TORCH_CHECK(
      backend == "gloo" || backend == "nccl" || backend == "auto",
      fn,
      "expected GroupOptions::backend \"gloo\", \"nccl\" or \"auto\", got \"",
      backend,
      "\"");
  if (backend == "auto") {
    return nccl_compiled() && torch::cuda::device_count() > 0 ? "nccl" : "gloo";
  }
  FRAMESHARD_TORCH_CHECK(
      backend != "nccl" || nccl_compiled(),
      fn,
      "expected a build with NCCL (FRAMESHARD_WITH_NCCL) for backend "
      "\"nccl\", got a build without it");
  return backend;
}

void check_group_options(const char* fn, const GroupOptions& options) {
  FRAMESHARD_TORCH_CHECK(
      options.timeout.count() > 0,
      fn,
      "expected a positive timeout, got ",
      options.timeout.count(),
      " ms");
  FRAMESHARD_TORCH_CHECK(
      options.threads >= 1, fn, "expected threads >= 1, got ", options.threads);
}

/// Reads an integer environment variable; nullopt when unset.
c10::optional<int64_t> env_int(const char* name, bool required) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') {
    FRAMESHARD_TORCH_CHECK(
        !required,
        "read_launch_env",
        "expected environment variable ",
        name,
        " to be set (by torchrun, SLURM or MPI), got nothing");
    return c10::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(raw, &end, 10);
  FRAMESHARD_TORCH_CHECK(
      errno == 0 && end != raw && *end == '\0',
      "read_launch_env",
      "expected environment variable ",
      name,
      " to be an integer, got '",
      raw,
      "'");
  return static_cast<int64_t>(value);
}

std::string join(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) {
    os << (i ? "," : "") << v[i];
  }
  return os.str();
}

}  // namespace

namespace {

// Forms the Gloo group, naming `where` the ranks meet in a failure.
ProcessGroupPtr join_gloo_group(
    const StorePtr& store,
    int rank,
    int size,
    const GroupOptions& options,
    const char* fn,
    const std::string& where) {
  try {
    internal::agree_on_group_size(store, rank, size, fn);
    return internal::gloo_process_group(store, rank, size, options);
  } catch (...) {
    internal::rethrow_rendezvous_failure(
        fn, rank, size, where, options.timeout);
  }
}

}  // namespace

ProcessGroupPtr make_gloo_group(
    const StorePtr& store, int rank, int size, const GroupOptions& options) {
  FRAMESHARD_TORCH_CHECK(
      store, "make_gloo_group", "expected a store, got null");
  check_rank_size("make_gloo_group", rank, size);
  check_group_options("make_gloo_group", options);
  return join_gloo_group(
      store, rank, size, options, "make_gloo_group", "the group's store");
}

ProcessGroupPtr make_file_store_group(
    const std::string& path, int rank, int size, const GroupOptions& options) {
  const char* fn = "make_file_store_group";
  FRAMESHARD_TORCH_CHECK(!path.empty(), fn, "expected a file path, got ''");
  check_rank_size(fn, rank, size);
  check_group_options(fn, options);
  internal::fault_point("start", rank);
  if (internal::fault_wanted("store", "remove", rank)) {
    internal::remove_store_when_created(path, options.timeout);
  }
  const std::string where = "the file store " + path;
  StorePtr store;
  try {
    store = c10::make_intrusive<c10d::FileStore>(path, size);
  } catch (...) {
    internal::rethrow_rendezvous_failure(
        fn, rank, size, where, options.timeout);
  }
  store->setTimeout(options.timeout);
  return join_gloo_group(store, rank, size, options, fn, where);
}

namespace {

// The launcher's variable names: torchrun's, else SLURM's (srun), else
// Open MPI's or PMI's (mpirun). The first launcher whose rank variable is
// set wins.
struct LauncherVars {
  const char* name;
  const char* rank;
  const char* world;
  const char* local_rank;
};
constexpr LauncherVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"openmpi",
     "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
};

const LauncherVars& detect_launcher() {
  for (const auto& l : kLaunchers) {
    if (env_int(l.rank, false)) {
      return l;
    }
  }
  return kLaunchers[0];  // torchrun's names in the "not set" errors
}

}  // namespace

bool launcher_env_present() {
  for (const auto& l : kLaunchers) {
    const char* v = std::getenv(l.rank);
    if (v != nullptr && *v != '\0') {
      return true;
    }
  }
  return false;
}

LaunchEnv read_launch_env() {
  LaunchEnv env;
  const LauncherVars& l = detect_launcher();
  env.launcher = l.name;
  const int64_t world = *env_int(l.world, true);
  FRAMESHARD_TORCH_CHECK(
      world >= 1 && world <= (1 << 24),
      "read_launch_env",
      "expected ",
      l.world,
      " >= 1, got ",
      world);
  const int64_t rank = *env_int(l.rank, true);
  FRAMESHARD_TORCH_CHECK(
      rank >= 0 && rank < world,
      "read_launch_env",
      "expected ",
      l.rank,
      " in [0, ",
      l.world,
      "=",
      world,
      "), got ",
      rank);
  // The local rank only matters for device selection; single-node launchers
  // that omit it mean local rank == rank.
  const auto local = env_int(l.local_rank, false);
  const int64_t local_rank = local ? *local : rank;
  FRAMESHARD_TORCH_CHECK(
      local_rank >= 0 && local_rank < world,
      "read_launch_env",
      "expected ",
      l.local_rank,
      " in [0, ",
      l.world,
      "=",
      world,
      "), got ",
      local_rank);
  const char* addr = std::getenv("MASTER_ADDR");
  FRAMESHARD_TORCH_CHECK(
      addr != nullptr && *addr != '\0',
      "read_launch_env",
      "expected environment variable MASTER_ADDR to be set (torchrun sets "
      "it; under ",
      l.name == std::string("torchrun") ? "SLURM or MPI" : l.name,
      " export the address of rank 0), got nothing");
  const int64_t port = *env_int("MASTER_PORT", true);
  FRAMESHARD_TORCH_CHECK(
      port >= 1 && port <= 65535,
      "read_launch_env",
      "expected MASTER_PORT in [1, 65535], got ",
      port);
  env.world_size = static_cast<int>(world);
  env.rank = static_cast<int>(rank);
  env.local_rank = static_cast<int>(local_rank);
  env.master_addr = addr;
  env.master_port = static_cast<int>(port);
  return env;
}

namespace {

bool agent_store_in_use() {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  return agent != nullptr && std::string(agent) == "True";
}

std::string store_address(const LaunchEnv& env, bool agent_store) {
  return "the store at " + env.master_addr + ":" +
         std::to_string(env.master_port) +
         (agent_store ? " (torchrun's agent)" : " (hosted by rank 0)");
}

}  // namespace

StorePtr make_store_from_env(
    const LaunchEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  // torchrun's agent already serves a store at MASTER_ADDR:MASTER_PORT and
  // says so (as torch.distributed's env:// rendezvous reads it): then every
  // rank is a client, else rank 0 hosts it.
  internal::fault_point("start", env.rank);
  const bool agent_store = agent_store_in_use();
  so.isServer = env.rank == 0 && !agent_store;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.waitWorkers = so.isServer;
  so.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (...) {
    internal::rethrow_rendezvous_failure(
        "make_store_from_env",
        env.rank,
        env.world_size,
        store_address(env, agent_store),
        timeout);
  }
}

ProcessGroupPtr make_group_from_env(const GroupOptions& options) {
  check_group_options("make_group_from_env", options);
  const LaunchEnv env = read_launch_env();
  StorePtr store = make_store_from_env(env, options.timeout);
  const std::string backend = resolve_backend(options.backend);
#ifdef FRAMESHARD_WITH_NCCL
  if (backend == "nccl") {
    const int64_t devices = torch::cuda::device_count();
    FRAMESHARD_TORCH_CHECK(
        env.local_rank < devices,
        "make_group_from_env",
        "expected a CUDA device for LOCAL_RANK=",
        env.local_rank,
        " (backend \"nccl\"), got ",
        devices,
        " CUDA devices");
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    guard.setDevice(
        c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank)));
    return make_nccl_group(store, env.rank, env.world_size, options);
  }
#endif
  return join_gloo_group(
      store,
      env.rank,
      env.world_size,
      options,
      "make_group_from_env",
      store_address(env, agent_store_in_use()));
}

bool nccl_compiled() {
#ifdef FRAMESHARD_WITH_NCCL
  return true;
#else
  return false;
#endif
}

ProcessGroupPtr make_nccl_group(
    const StorePtr& store, int rank, int size, const GroupOptions& options) {
  FRAMESHARD_TORCH_CHECK(
      nccl_compiled(),
      "make_nccl_group",
      "expected a build with the NCCL path (FRAMESHARD_WITH_NCCL: a CUDA torch "
      "and gloo's headers), got a build without it");
  FRAMESHARD_TORCH_CHECK(
      store, "make_nccl_group", "expected a store, got null");
  check_rank_size("make_nccl_group", rank, size);
  check_group_options("make_nccl_group", options);
  try {
    internal::agree_on_group_size(store, rank, size, "make_nccl_group");
    return internal::nccl_process_group(store, rank, size, options);
  } catch (...) {
    internal::rethrow_rendezvous_failure(
        "make_nccl_group", rank, size, "the group's store", options.timeout);
  }
}

ProcessGroupPtr make_subgroup(
    const StorePtr& store,
    int global_rank,
    const std::vector<int>& members,
    const std::string& tag,
    const GroupOptions& options) {
  const char* fn = "make_subgroup";
  FRAMESHARD_TORCH_CHECK(store, fn, "expected a store, got null");
  FRAMESHARD_TORCH_CHECK(
      !members.empty(), fn, "expected at least one member, got none");
  for (size_t i = 0; i < members.size(); ++i) {
    FRAMESHARD_TORCH_CHECK(
        members[i] >= 0,
        fn,
        "expected non-negative member ranks, got ",
        members[i]);
    FRAMESHARD_TORCH_CHECK(
        i == 0 || members[i] > members[i - 1],
        fn,
        "expected ascending members without duplicates, got [",
        join(members),
        "]");
  }
  const auto it = std::find(members.begin(), members.end(), global_rank);
  FRAMESHARD_TORCH_CHECK(
      it != members.end(),
      fn,
      "expected global_rank ",
      global_rank,
      " among the members [",
      join(members),
      "]");
  const int rank = static_cast<int>(it - members.begin());
  StorePtr prefixed = c10::make_intrusive<c10d::PrefixStore>(
      "frameshard/" + tag + "/" + join(members), store);
  return make_gloo_group(
      prefixed, rank, static_cast<int>(members.size()), options);
}

}  // namespace frameshard
