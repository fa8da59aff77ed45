// !!! Internal header of frameshard::runtime, not installed. !!!
// Failure injection for the reliability tests (tests/cli/fault_test.sh,
// docs/reliability.md): the environment variable
//
//   FRAMESHARD_FAULT=<rank>:<phase>:<action>
//
// makes rank <rank> fail at <phase> (of make_file_store_group or
// frameshard::encode):
//   phase   start      before joining the store (start-up of a CLI rank)
//           tower      just before the tower runs (the local phase)
//           consensus  just before the consensus all-gather
//           gather     just before the gather / all-to-all of the outputs
//   action  kill   SIGKILL itself (a crashed or OOM-killed rank)
//           exit   exit code 3 without unwinding (a rank that quits)
//           raise  throw c10::Error (a local failure the consensus reports)
//           hang   sleep for an hour (a stopped rank: peers time out)
// Read once, on the first call; unset (the normal case) costs one branch
// per fault point. A malformed value raises naming the variable.
// Defined in src/runtime/fault.cpp.
#pragma once

namespace frameshard {
namespace internal {

/// Applies FRAMESHARD_FAULT when it names this rank and phase.
void fault_point(const char* phase, int rank);

}  // namespace internal
}  // namespace frameshard
