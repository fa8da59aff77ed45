// !!! Internal header of frameshard::runtime, not installed. !!!
// Joining a group, made a clear error when it cannot happen (issue 13): a
// peer that never comes, ranks that disagree on the group's size, a store
// that went away. c10d alone reports these as a bare "Timeout waiting for
// key" or a socket error, after the whole timeout.
//
//   agree_on_group_size(store, rank, size, fn);   // before Gloo connects
//   try { ... } catch (...) {
//     rethrow_rendezvous_failure(fn, rank, size, "the store at h:p", timeout);
//   }
//
// Defined in src/runtime/rendezvous.cpp.
#pragma once

#include <frameshard/runtime/process_group.h>

#include <chrono>
#include <string>

namespace frameshard {
namespace internal {

/// The first rank to reach `store` records `size`; a later rank whose size
/// differs raises at once ("expected a group of <first>, got <size>")
/// instead of waiting out the timeout for a peer that never comes. Ranks
/// of different groups must use different (prefix) stores, as c10d's own
/// keys require anyway.
void agree_on_group_size(
    const StorePtr& store, int rank, int size, const char* fn);

/// Rethrows the exception being handled as "frameshard::<fn>: [rank r/W]
/// expected all W ranks to join through <where> within <timeout> ms, got:
/// <its message>". Call only inside a catch block.
[[noreturn]] void rethrow_rendezvous_failure(
    const char* fn,
    int rank,
    int size,
    const std::string& where,
    std::chrono::milliseconds timeout);

/// FRAMESHARD_FAULT=<rank>:store:remove (runtime/fault.h): waits (within
/// `timeout`) until a peer has created the file store at `path`, then
/// deletes it, as a cleaner emptying /tmp would.
void remove_store_when_created(
    const std::string& path, std::chrono::milliseconds timeout);

}  // namespace internal
}  // namespace frameshard
