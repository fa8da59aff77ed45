#include "runtime/fault.h"

#include <frameshard/error.h>

#include "tower/check.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

namespace frameshard {
namespace internal {
namespace {

struct Fault {
  bool set = false;
  int rank = -1;
  std::string phase;
  std::string action;
  std::string error;  // non-empty: the variable is malformed
};

Fault read_fault() {
  Fault f;
  const char* env = std::getenv("FRAMESHARD_FAULT");
  if (env == nullptr || *env == '\0') {
    return f;
  }
  f.set = true;
  std::istringstream in(env);
  std::string rank;
  const bool parsed =
      std::getline(in, rank, ':') && std::getline(in, f.phase, ':') &&
      std::getline(in, f.action) &&
      rank.find_first_not_of("0123456789") == std::string::npos &&
      !rank.empty() && rank.size() < 6;
  const bool failure = (f.phase == "start" || f.phase == "tower" ||
                        f.phase == "consensus" || f.phase == "gather") &&
                       (f.action == "kill" || f.action == "exit" ||
                        f.action == "raise" || f.action == "hang");
  const bool input =
      f.phase == "input" && (f.action == "grid" || f.action == "dtype" ||
                             f.action == "config" || f.action == "world");
  const bool store = f.phase == "store" && f.action == "remove";
  if (!parsed || !(failure || input || store)) {
    f.error = detail::error_message(
        "fault_point",
        "expected FRAMESHARD_FAULT=<rank>:<start|tower|consensus|gather>:"
        "<kill|exit|raise|hang>, <rank>:input:<grid|dtype|config|world> or "
        "<rank>:store:remove, got ",
        detail::excerpt(env));
    return f;
  }
  f.rank = std::stoi(rank);
  return f;
}

const Fault& the_fault() {
  static const Fault fault = read_fault();
  TORCH_CHECK(fault.error.empty(), fault.error);
  return fault;
}

}  // namespace

void fault_point(const char* phase, int rank) {
  const Fault& fault = the_fault();
  if (!fault.set || fault.rank != rank || fault.phase != phase) {
    return;
  }
  if (fault.action == "kill") {
    ::kill(::getpid(), SIGKILL);
  } else if (fault.action == "exit") {
    std::_Exit(3);
  } else if (fault.action == "hang") {
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  TORCH_CHECK(
      false,
      detail::error_prefix("fault_point"),
      "injected failure (FRAMESHARD_FAULT) at ",
      phase,
      " on rank ",
      rank);
}

bool fault_wanted(const char* phase, const char* action, int rank) {
  const Fault& fault = the_fault();
  return fault.set && fault.rank == rank && fault.phase == phase &&
         fault.action == action;
}

}  // namespace internal
}  // namespace frameshard
