// Entry point of the multi-rank test programs (frameshard_dist_tests,
// frameshard_dist_tower_tests, frameshard_train_tests). Ranks are threads of
// one process, so torch's intra-op pool is pinned to one thread: several ranks
// each spawning a full pool would oversubscribe the cores and slow every test.
//
// SIGPIPE is ignored, as Python (and so torch.distributed) does: Gloo writes
// to peers' sockets, and after a peer exits such a write must become an
// error on the survivors (what the peer-exit tests check), not a signal
// that kills the whole process.

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
