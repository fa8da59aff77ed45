// !!! Internal header of frameshard::core, not installed. !!!
//
// The receiving side of a route (frameshard/owner_route.h, mesh_plan.h):
// rows arrive concatenated in source-rank order; the receiver wants them in
// ascending token order.
#pragma once

#include <frameshard/owner_route.h>

#include <cstdint>
#include <vector>

namespace frameshard {
namespace internal {

/// Sets r.recv_order (received row -> ascending token order) and r.tokens
/// from `arrived`, the token of each received row in arrival order.
void set_arrival_order(const std::vector<int64_t>& arrived, OwnerRoute& r);

}  // namespace internal
}  // namespace frameshard
