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
  const bool known = parsed &&
                     (f.phase == "start" || f.phase == "tower" ||
                      f.phase == "consensus" || f.phase == "gather") &&
                     (f.action == "kill" || f.action == "exit" ||
                      f.action == "raise" || f.action == "hang");
  if (!known) {
    f.error = detail::error_message(
        "fault_point",
        "expected FRAMESHARD_FAULT=<rank>:<start|tower|consensus|gather>:"
        "<kill|exit|raise|hang>, got ",
        detail::excerpt(env));
    return f;
  }
  f.rank = std::stoi(rank);
  return f;
}

}  // namespace

void fault_point(const char* phase, int rank) {
  static const Fault fault = read_fault();
  if (!fault.set) {
    return;
  }
  TORCH_CHECK(fault.error.empty(), fault.error);
  if (fault.rank != rank || fault.phase != phase) {
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

}  // namespace internal
}  // namespace frameshard
