// Entry point of frameshard_dist_tests. Ranks are threads of this process,
// so torch's intra-op pool is pinned to one thread: several ranks each
// spawning a full pool would oversubscribe the cores and slow every test.

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
