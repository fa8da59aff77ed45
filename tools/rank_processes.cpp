#include "rank_processes.h"

#include "line_relay.h"

#include <frameshard/error.h>

#include <c10/util/Exception.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <system_error>

namespace frameshard {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe_status(int status) {
  if (WIFEXITED(status)) {
    return "exited with code " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status));
  }
  return "ended with status " + std::to_string(status);
}

// 0, or an exit code in [1, max_result_code]: a result, not a failure.
bool is_result(int status, int max_result_code) {
  return WIFEXITED(status) && WEXITSTATUS(status) <= max_result_code;
}

std::vector<pid_t> start_ranks(const RankLaunch& l, const LineRelay& relay) {
  const char* cmd = l.command.c_str();
  std::cout << std::flush;
  std::cerr << std::flush;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < l.nproc; ++rank) {
    std::vector<std::string> args{
        "frameshard",
        l.command,
        "--worker-rank",
        std::to_string(rank),
        "--store-path",
        l.store_path};
    args.insert(args.end(), l.worker_args.begin(), l.worker_args.end());
    std::vector<char*> argv;
    for (auto& s : args) {
      argv.push_back(s.data());
    }
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // A worker must not outlive the parent (e.g. killed by a CI timeout).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) {
        _exit(127);
      }
      relay.attach_child(rank);
      execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "error: %s: exec of /proc/self/exe failed\n", cmd);
      _exit(127);
    }
    if (pid < 0) {
      const int err = errno;
      for (pid_t p : pids) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
      detail::fail(cmd, "expected fork to succeed, got errno ", err);
    }
    pids.push_back(pid);
  }
  return pids;
}

}  // namespace

TempDir::TempDir(const std::string& command) {
  const std::string tmpl = (std::filesystem::temp_directory_path() /
                            ("frameshard_" + command + "_XXXXXX"))
                               .string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  FRAMESHARD_CHECK(
      mkdtemp(buf.data()) != nullptr,
      command.c_str(),
      "expected a temporary directory, got errno ",
      errno);
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void check_rank_options(
    const std::string& command, int nproc, int64_t timeout_ms) {
  FRAMESHARD_CHECK(
      nproc >= 1 && nproc <= 64,
      command.c_str(),
      "expected --nproc in [1, 64], got ",
      nproc);
  FRAMESHARD_CHECK(
      timeout_ms > 0,
      command.c_str(),
      "expected --timeout-ms > 0, got ",
      timeout_ms);
}

int run_rank_processes(const RankLaunch& l) {
  LineRelay relay(l.command, l.nproc);
  const std::vector<pid_t> pids = start_ranks(l, relay);
  relay.close_child_ends();

  // Wait for every rank, relaying their stderr. Once one fails, the others
  // get a short grace (a peer's death closes its sockets, so a rank inside a
  // collective raises its own error at once); a rank still running then
  // waits for something that will not come (a store key, a connection):
  // it is killed, instead of waiting out the collective timeout.
  std::vector<int> status(l.nproc, 0);
  std::vector<bool> done(l.nproc, false);
  int remaining = l.nproc;
  int first_failed = -1;
  Clock::time_point kill_at = Clock::time_point::max();
  const auto grace = std::min<std::chrono::milliseconds>(
      l.timeout + std::chrono::seconds(5), kPeerFailureGrace);
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < l.nproc; ++r) {
      if (done[r]) {
        continue;
      }
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        status[r] = st;
        --remaining;
        progressed = true;
        if (!is_result(st, l.max_result_code) && first_failed < 0) {
          first_failed = r;
          kill_at = Clock::now() + grace;
        }
      }
    }
    if (remaining > 0 && Clock::now() >= kill_at) {
      for (int r = 0; r < l.nproc; ++r) {
        if (!done[r]) {
          std::cerr << "error: " << l.command << ": rank " << r
                    << " still running " << grace.count() << " ms after rank "
                    << first_failed << " failed; killing it\n";
          kill(pids[r], SIGKILL);
        }
      }
      kill_at = Clock::time_point::max();
    }
    if (!progressed) {
      relay.pump(std::chrono::milliseconds(20));
    }
  }
  relay.drain();

  int result = 0;
  for (int r = 0; r < l.nproc; ++r) {
    const int st = status[r];
    if (is_result(st, l.max_result_code)) {
      result = std::max(result, WEXITSTATUS(st));
      continue;
    }
    std::cerr << "error: " << l.command << ": rank " << r << " "
              << describe_status(st) << "\n";
  }
  return first_failed >= 0 ? 2 : result;
}

int run_worker_guarded(
    const std::string& command, int rank, const std::function<int()>& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    std::cerr << "error: [" << command << " rank " << rank << "] "
              << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: [" << command << " rank " << rank << "] " << e.what()
              << "\n";
  }
  return 2;
}

}  // namespace cli
}  // namespace frameshard
