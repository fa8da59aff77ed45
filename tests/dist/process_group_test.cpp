// Process groups: Gloo over a HashStore / FileStore / the torchrun
// environment, subgroups over a PrefixStore, and the DP x CP x TP mesh
// arithmetic that picks each group's members.

#include <frameshard/runtime/process_group.h>

#include "testing/run_ranks.h"
#include "testing/tensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace frameshard {
namespace {

using testing::run_ranks;
using testing::torch_error_of;

using Ranks = std::vector<int>;

TEST(MeshGroupRanks, DpCpTpCube) {
  const MeshShape s{2, 2, 2};
  // Global rank 5 = (dp 1, cp 0, tp 1).
  EXPECT_EQ(mesh_group_ranks(s, {"cp"}, 5), (Ranks{5, 7}));
  EXPECT_EQ(mesh_group_ranks(s, {"tp"}, 5), (Ranks{4, 5}));
  EXPECT_EQ(mesh_group_ranks(s, {"dp"}, 5), (Ranks{1, 5}));
  EXPECT_EQ(mesh_group_ranks(s, {"cp", "tp"}, 5), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(mesh_group_ranks(s, {"tp", "cp"}, 5), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(mesh_group_ranks(s, {"dp", "cp"}, 5), (Ranks{1, 3, 5, 7}));
  EXPECT_EQ(
      mesh_group_ranks(s, {"dp", "cp", "tp"}, 5),
      (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh_group_ranks(s, {}, 5), (Ranks{5}));
}

TEST(MeshGroupRanks, DpCpWithoutTp) {
  const MeshShape s{2, 2, 1};
  EXPECT_EQ(mesh_group_ranks(s, {"cp"}, 0), (Ranks{0, 1}));
  EXPECT_EQ(mesh_group_ranks(s, {"cp"}, 3), (Ranks{2, 3}));
  EXPECT_EQ(mesh_group_ranks(s, {"dp"}, 1), (Ranks{1, 3}));
  EXPECT_EQ(mesh_groups(s, {"cp"}), (std::vector<Ranks>{{0, 1}, {2, 3}}));
  EXPECT_EQ(mesh_groups(s, {"dp"}), (std::vector<Ranks>{{0, 2}, {1, 3}}));
}

TEST(MeshGroups, PartitionTheWorld) {
  EXPECT_EQ(
      mesh_groups({2, 3, 1}, {"cp"}),
      (std::vector<Ranks>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(
      mesh_groups({1, 2, 2}, {"cp"}), (std::vector<Ranks>{{0, 2}, {1, 3}}));
  EXPECT_EQ(
      mesh_groups({2, 2, 2}, {"cp", "tp"}),
      (std::vector<Ranks>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // Every rank in exactly one group, for every choice of dims.
  const MeshShape s{3, 2, 2};
  for (const auto& dims : std::vector<std::vector<std::string>>{
           {"dp"}, {"cp"}, {"tp"}, {"dp", "tp"}, {"cp", "tp"}, {}}) {
    std::vector<int> seen(static_cast<size_t>(s.size()), 0);
    for (const auto& g : mesh_groups(s, dims)) {
      for (int r : g) {
        ++seen[static_cast<size_t>(r)];
        EXPECT_EQ(mesh_group_ranks(s, dims, r), g);
      }
    }
    for (int c : seen) {
      EXPECT_EQ(c, 1);
    }
  }
}

TEST(MeshGroupRanks, RejectsBadArguments) {
  EXPECT_NE(
      torch_error_of([] {
        mesh_group_ranks({2, 2, 1}, {"pp"}, 0);
      }).find("expected mesh_dims entries among dp, cp, tp, got 'pp'"),
      std::string::npos);
  EXPECT_NE(
      torch_error_of([] {
        mesh_group_ranks({2, 2, 1}, {"cp", "cp"}, 0);
      }).find("without duplicates"),
      std::string::npos);
  EXPECT_NE(
      torch_error_of([] {
        mesh_group_ranks({2, 2, 1}, {"cp"}, 4);
      }).find("expected global_rank in [0, 4), got 4"),
      std::string::npos);
  EXPECT_NE(
      torch_error_of([] {
        mesh_groups({0, 2, 1}, {"cp"});
      }).find("expected mesh sizes >= 1"),
      std::string::npos);
}

TEST(MakeGlooGroup, RejectsBadRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_NE(
      torch_error_of([&] {
        make_gloo_group(store, 2, 2);
      }).find("frameshard::make_gloo_group: expected rank in [0, 2), got 2"),
      std::string::npos);
  EXPECT_NE(
      torch_error_of([&] {
        make_gloo_group(StorePtr(), 0, 1);
      }).find("expected a store"),
      std::string::npos);
}

TEST(MakeFileStoreGroup, AllreduceOverAFileStore) {
  testing::RunRanksOptions opts;
  opts.file_store = true;
  std::vector<double> sums(3);
  run_ranks(
      3,
      [&](int rank, ProcessGroupPtr pg) {
        EXPECT_EQ(pg->getBackendName(), "gloo");
        sums[rank] =
            testing::allreduce_sum(pg, at::full({1}, rank + 1.0, at::kDouble))
                .item<double>();
      },
      opts);
  for (double s : sums) {
    EXPECT_EQ(s, 6.0);
  }
}

// dp=2 x cp=2: two CP subgroups and two DP subgroups over one store, built
// concurrently; each reduces over exactly its members.
TEST(MakeSubgroup, CpAndDpGroupsOfA2x2World) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::seconds(5));
  const MeshShape shape{2, 2, 1};
  std::vector<double> cp_sum(4), dp_sum(4);
  std::vector<int> cp_rank(4), cp_size(4);
  run_ranks(4, [&](int rank, ProcessGroupPtr) {
    GroupOptions go;
    go.timeout = std::chrono::seconds(5);
    go.threads = 1;
    auto cp = make_subgroup(
        store, rank, mesh_group_ranks(shape, {"cp"}, rank), "cp", go);
    auto dp = make_subgroup(
        store, rank, mesh_group_ranks(shape, {"dp"}, rank), "dp", go);
    cp_rank[rank] = cp->getRank();
    cp_size[rank] = cp->getSize();
    const auto value =
        at::full({1}, static_cast<double>(1 << rank), at::kDouble);
    cp_sum[rank] = testing::allreduce_sum(cp, value).item<double>();
    dp_sum[rank] = testing::allreduce_sum(dp, value).item<double>();
  });
  EXPECT_EQ(cp_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(cp_size, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(cp_sum, (std::vector<double>{3, 3, 12, 12}));
  EXPECT_EQ(dp_sum, (std::vector<double>{5, 10, 5, 10}));
}

TEST(MakeSubgroup, RejectsBadMembers) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_NE(
      torch_error_of([&] {
        make_subgroup(store, 1, {0, 2}, "cp");
      }).find("expected global_rank 1 among the members [0,2]"),
      std::string::npos);
  EXPECT_NE(
      torch_error_of([&] {
        make_subgroup(store, 0, {2, 0}, "cp");
      }).find("expected ascending members without duplicates, got [2,0]"),
      std::string::npos);
  EXPECT_NE(
      torch_error_of([&] {
        make_subgroup(store, 0, {}, "cp");
      }).find("expected at least one member"),
      std::string::npos);
}

/// Sets the torchrun variables for one test (and clears SLURM's and MPI's)
/// and restores them after.
class LaunchEnvTest : public ::testing::Test {
 protected:
  const std::vector<std::string> names_ = {
      "RANK",
      "WORLD_SIZE",
      "LOCAL_RANK",
      "MASTER_ADDR",
      "MASTER_PORT",
      "SLURM_PROCID",
      "SLURM_NTASKS",
      "SLURM_LOCALID",
      "OMPI_COMM_WORLD_RANK",
      "OMPI_COMM_WORLD_SIZE",
      "OMPI_COMM_WORLD_LOCAL_RANK",
      "PMI_RANK",
      "PMI_SIZE",
      "MPI_LOCALRANKID"};
  std::map<std::string, std::string> saved_;
  std::map<std::string, bool> had_;

  void SetUp() override {
    for (const auto& n : names_) {
      const char* v = std::getenv(n.c_str());
      had_[n] = v != nullptr;
      saved_[n] = v ? v : "";
    }
    for (const auto& n : names_) {
      unsetenv(n.c_str());
    }
    set("RANK", "0");
    set("WORLD_SIZE", "1");
    set("LOCAL_RANK", "0");
    set("MASTER_ADDR", "127.0.0.1");
    set("MASTER_PORT", "29500");
  }
  void TearDown() override {
    for (const auto& n : names_) {
      if (had_[n]) {
        setenv(n.c_str(), saved_[n].c_str(), 1);
      } else {
        unsetenv(n.c_str());
      }
    }
  }
  static void set(const char* name, const char* value) {
    setenv(name, value, 1);
  }
};

TEST_F(LaunchEnvTest, ReadsTheTorchrunVariables) {
  set("RANK", "3");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "1");
  set("MASTER_ADDR", "10.0.0.7");
  set("MASTER_PORT", "1234");
  const LaunchEnv env = read_launch_env();
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 1234);
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(read_launch_env().local_rank, 3);
}

TEST_F(LaunchEnvTest, ReadsSlurmAndMpiVariablesWhenTorchrunsAreAbsent) {
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_RANK");
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "8");
  set("SLURM_LOCALID", "1");
  LaunchEnv env = read_launch_env();
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  set("SLURM_NTASKS", "4");
  EXPECT_NE(
      torch_error_of([] {
        read_launch_env();
      }).find("expected SLURM_PROCID in [0, SLURM_NTASKS=4), got 5"),
      std::string::npos);
  unsetenv("SLURM_PROCID");
  set("OMPI_COMM_WORLD_RANK", "2");
  set("OMPI_COMM_WORLD_SIZE", "3");
  env = read_launch_env();
  EXPECT_EQ(env.launcher, "openmpi");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.local_rank, 2);  // no local rank: single node
  set("RANK", "0");              // torchrun's names win when set
  set("WORLD_SIZE", "1");
  EXPECT_EQ(read_launch_env().launcher, "torchrun");
}

TEST_F(LaunchEnvTest, ErrorsNameTheVariable) {
  unsetenv("RANK");
  EXPECT_NE(
      torch_error_of([] {
        read_launch_env();
      }).find("expected environment variable RANK to be set"),
      std::string::npos);
  set("RANK", "x1");
  EXPECT_NE(
      torch_error_of([] {
        read_launch_env();
      }).find("expected environment variable RANK to be an integer, got 'x1'"),
      std::string::npos);
  set("RANK", "1");
  EXPECT_NE(
      torch_error_of([] {
        read_launch_env();
      }).find("expected RANK in [0, WORLD_SIZE=1), got 1"),
      std::string::npos);
  set("RANK", "0");
  set("WORLD_SIZE", "0");
  EXPECT_NE(
      torch_error_of([] { read_launch_env(); }).find("WORLD_SIZE >= 1, got 0"),
      std::string::npos);
  set("WORLD_SIZE", "1");
  set("MASTER_PORT", "70000");
  EXPECT_NE(
      torch_error_of([] {
        read_launch_env();
      }).find("expected MASTER_PORT in [1, 65535], got 70000"),
      std::string::npos);
  unsetenv("MASTER_ADDR");
  EXPECT_NE(
      torch_error_of([] {
        read_launch_env();
      }).find("expected environment variable MASTER_ADDR to be set"),
      std::string::npos);
}

/// A TCP port that was free a moment ago (bind to 0, read, close).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) {
      close(fd);
    }
    return 0;
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

TEST_F(LaunchEnvTest, GroupFromEnvWorldOne) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  set("MASTER_PORT", std::to_string(port).c_str());
  GroupOptions go;
  go.timeout = std::chrono::seconds(10);
  auto pg = make_group_from_env(go);
  EXPECT_EQ(pg->getSize(), 1);
  EXPECT_EQ(pg->getRank(), 0);
  EXPECT_EQ(
      testing::allreduce_sum(pg, at::full({1}, 2.5, at::kDouble))
          .item<double>(),
      2.5);
}

TEST_F(LaunchEnvTest, BackendAutoIsGlooWithoutACudaDevice) {
  if (testing::cuda_devices() > 0) {
    GTEST_SKIP() << "this machine has a CUDA device: auto picks NCCL "
                    "(covered by scripts/gpu-check.sh)";
  }
  set("MASTER_PORT", std::to_string(free_port()).c_str());
  GroupOptions go;
  go.timeout = std::chrono::seconds(10);
  go.backend = "auto";
  EXPECT_EQ(make_group_from_env(go)->getBackendName(), "gloo");
}

TEST_F(LaunchEnvTest, BackendErrorsNameTheChoiceAndTheDevice) {
  set("MASTER_PORT", std::to_string(free_port()).c_str());
  GroupOptions go;
  go.timeout = std::chrono::seconds(10);
  go.backend = "mpi";
  EXPECT_NE(
      torch_error_of([&] { make_group_from_env(go); })
          .find("expected GroupOptions::backend \"gloo\", \"nccl\" or "
                "\"auto\", got \"mpi\""),
      std::string::npos);
  go.backend = "nccl";
  const std::string nccl = torch_error_of([&] { make_group_from_env(go); });
  if (!nccl_compiled()) {
    EXPECT_NE(nccl.find("expected a build with NCCL"), std::string::npos);
  } else if (testing::cuda_devices() == 0) {
    EXPECT_NE(
        nccl.find("expected a CUDA device for LOCAL_RANK=0 (backend "
                  "\"nccl\"), got 0 CUDA devices"),
        std::string::npos)
        << nccl;
  }
}

}  // namespace
}  // namespace frameshard
