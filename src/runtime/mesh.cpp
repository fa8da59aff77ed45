// The DP x CP x TP mesh arithmetic of frameshard/runtime/process_group.h:
// which global ranks share a group. Pure integer arithmetic, no c10d.
#include <frameshard/runtime/process_group.h>

#include "tower/check.h"

#include <array>
#include <string>
#include <vector>

namespace frameshard {

namespace {

/// Which of dp, cp, tp the group spans (validated names, no duplicates).
std::array<bool, 3> spanned_dims(
    const std::vector<std::string>& mesh_dims, const char* fn) {
  std::array<bool, 3> spans{false, false, false};
  for (const auto& d : mesh_dims) {
    int index = -1;
    if (d == "dp") {
      index = 0;
    } else if (d == "cp") {
      index = 1;
    } else if (d == "tp") {
      index = 2;
    }
    FRAMESHARD_TORCH_CHECK(
        index >= 0,
        fn,
        "expected mesh_dims entries among dp, cp, tp, got '",
        d,
        "'");
    FRAMESHARD_TORCH_CHECK(
        !spans[index],
        fn,
        "expected mesh_dims without duplicates, got '",
        d,
        "' twice");
    spans[index] = true;
  }
  return spans;
}

void check_shape(const MeshShape& shape, const char* fn) {
  FRAMESHARD_TORCH_CHECK(
      shape.dp >= 1 && shape.cp >= 1 && shape.tp >= 1,
      fn,
      "expected mesh sizes >= 1, got dp=",
      shape.dp,
      " cp=",
      shape.cp,
      " tp=",
      shape.tp);
  FRAMESHARD_TORCH_CHECK(
      shape.size() <= (int64_t{1} << 24),
      fn,
      "expected a mesh of at most 2^24 ranks, got ",
      shape.size());
}

}  // namespace

std::vector<int> mesh_group_ranks(
    const MeshShape& shape,
    const std::vector<std::string>& mesh_dims,
    int global_rank) {
  const char* fn = "mesh_group_ranks";
  check_shape(shape, fn);
  const auto spans = spanned_dims(mesh_dims, fn);
  FRAMESHARD_TORCH_CHECK(
      global_rank >= 0 && global_rank < shape.size(),
      fn,
      "expected global_rank in [0, ",
      shape.size(),
      "), got ",
      global_rank);
  const int64_t sizes[3] = {shape.dp, shape.cp, shape.tp};
  int64_t coord[3] = {
      global_rank / (shape.cp * shape.tp),
      (global_rank / shape.tp) % shape.cp,
      global_rank % shape.tp};
  // Row-major enumeration over the spanned dims (dp outermost) keeps the
  // result ascending, since global rank is row-major in (dp, cp, tp).
  const int64_t lo[3] = {
      spans[0] ? 0 : coord[0],
      spans[1] ? 0 : coord[1],
      spans[2] ? 0 : coord[2]};
  const int64_t hi[3] = {
      spans[0] ? sizes[0] : coord[0] + 1,
      spans[1] ? sizes[1] : coord[1] + 1,
      spans[2] ? sizes[2] : coord[2] + 1};
  std::vector<int> members;
  for (int64_t d = lo[0]; d < hi[0]; ++d) {
    for (int64_t c = lo[1]; c < hi[1]; ++c) {
      for (int64_t t = lo[2]; t < hi[2]; ++t) {
        members.push_back(static_cast<int>((d * shape.cp + c) * shape.tp + t));
      }
    }
  }
  return members;
}

std::vector<std::vector<int>> mesh_groups(
    const MeshShape& shape, const std::vector<std::string>& mesh_dims) {
  check_shape(shape, "mesh_groups");
  spanned_dims(mesh_dims, "mesh_groups");
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < shape.size(); ++r) {
    auto members = mesh_group_ranks(shape, mesh_dims, r);
    if (members.front() == r) {
      groups.push_back(std::move(members));
    }
  }
  return groups;
}

}  // namespace frameshard
