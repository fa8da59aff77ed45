// !!! Internal header of frameshard::runtime, not installed. !!!
// Failure injection for the reliability tests (tests/cli/fault_test.sh,
// docs/reliability.md): the environment variable
//
//   FRAMESHARD_FAULT=<rank>:<phase>:<action>
//
// makes rank <rank> fail at <phase> (of a group's rendezvous or
// frameshard::encode):
//   phase   start      before joining the store (start-up of a rank)
//           tower      just before the tower runs (the local phase)
//           consensus  just before the consensus all-gather
//           gather     just before the gather / all-to-all of the outputs
//   action  kill   SIGKILL itself (a crashed or OOM-killed rank)
//           exit   exit code 3 without unwinding (a rank that quits)
//           raise  throw c10::Error (a local failure the consensus reports)
//           hang   sleep for an hour (a stopped rank: peers time out)
// or makes it disagree with its peers or lose the store (the caller acts,
// asking fault_wanted):
//   input:grid    its workload gains a frame (the CLI's workers)
//   input:dtype   float32 where the others use float64, or the reverse
//   input:config  the other partitioner (contiguous <-> lpt)
//   input:world   it joins a group one rank larger than the others' group
//   store:remove  make_file_store_group: once a peer has created the store
//                 file, it deletes it (a cleaner emptying /tmp) and joins
// Read once, on the first call; unset (the normal case) costs one branch
// per call. A malformed value raises naming the variable.
// Defined in src/runtime/fault.cpp.
#pragma once

namespace frameshard {
namespace internal {

/// Applies FRAMESHARD_FAULT when it names this rank and phase (start,
/// tower, consensus, gather).
void fault_point(const char* phase, int rank);

/// True when FRAMESHARD_FAULT is exactly <rank>:<phase>:<action> (the input
/// and store faults, which the caller carries out).
bool fault_wanted(const char* phase, const char* action, int rank);

}  // namespace internal
}  // namespace frameshard
