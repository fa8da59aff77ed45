// Regression tests of what the libFuzzer harnesses (tests/fuzz) found in the
// torch-free core: each case is the minimised finding, now a clear
// frameshard::Error instead of a crash. docs/reliability.md lists the runs.
#include <frameshard/error.h>
#include <frameshard/frames.h>
#include <frameshard/partition.h>
#include <frameshard/plan.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "testing/expect_error.h"

namespace frameshard {
namespace {

using testing::error_of;
using testing::expect_contains;

// plan_fuzz: an lpt plan whose gather order differs from the original one
// sizes restore_rows by the token count; 2^38 tokens (a grid row within the
// workload file's limits) threw std::length_error out of make_plan.
TEST(FuzzFindings, LptRestoreRowsBeyondTheLimitAreRefusedBeforeAllocating) {
  PlanOptions o;
  o.world = 2;
  o.partitioner = Partitioner::kLpt;
  const int64_t big = int64_t{1} << 20;
  // The large frame goes to rank 0, the small one (first) to rank 1.
  expect_contains(
      error_of([&] {
        make_plan({{1, 2, 2}, {1, big, big}}, o);
      }),
      "frameshard::make_plan: expected at most 134217728 tokens in a "
      "non-contiguous (lpt) plan, got 274877906945");
  // Below the limit the same shape plans, with the restoring permutation.
  const ShardPlan small = make_plan({{1, 2, 2}, {1, 8, 8}}, o);
  EXPECT_EQ(small.restore_rows.size(), 17u);
}

// plan_fuzz: an empty grid with a huge spatial_merge_size squared it
// (signed overflow, UB; UBSan aborts the test binary of the sanitizer tier).
TEST(FuzzFindings, HugeMergeSizeIsRefusedBeforeItIsSquared) {
  MediaLayout layout;
  layout.spatial_merge_size = int64_t{1} << 62;
  PlanOptions o;
  o.layout = layout;
  expect_contains(
      error_of([&] { make_plan({}, o); }),
      "frameshard::expand_frames: expected layout.spatial_merge_size <= "
      "1048576, got 4611686018427387904");
  o.layout.spatial_merge_size = int64_t{1} << 20;  // the limit
  EXPECT_EQ(make_plan({}, o).frames.total_tokens, 0);
}

}  // namespace
}  // namespace frameshard
