// Local multi-process runs shared by `frameshard verify` and `frameshard
// encode`: the parent starts N copies of this binary (fork + exec of
// /proc/self/exe) in the command's hidden worker mode
// (`<command> --worker-rank r --store-path P ...`); the workers rendezvous
// through a c10d::FileStore at P, in a fresh temporary directory.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

/// A fresh directory <temp>/frameshard_<command>_XXXXXX, removed with its
/// contents however the parent leaves (return, exception).
class TempDir {
 public:
  explicit TempDir(const std::string& command);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const {
    return path_;
  }

 private:
  std::string path_;
};

/// How long the surviving ranks get, once one failed, before the parent
/// kills them (a rank that died at start-up would otherwise leave the others
/// waiting out the whole collective timeout).
inline constexpr std::chrono::milliseconds kPeerFailureGrace{3000};

/// N worker processes of one subcommand.
struct RankLaunch {
  /// The subcommand: the workers' argv[1] and the prefix of every message
  /// ("error: <command>: rank r ...").
  std::string command;
  int nproc = 1;
  /// The FileStore path every worker gets as --store-path.
  std::string store_path;
  /// The options every worker gets; --worker-rank r and --store-path are
  /// added by run_rank_processes.
  std::vector<std::string> worker_args;
  /// The workers' collective timeout. Once a rank fails, the others get
  /// kPeerFailureGrace (or this plus 5 s when shorter) to report their own
  /// error and exit; then they are killed.
  std::chrono::milliseconds timeout{60000};
  /// Worker exit codes in [1, max_result_code] are a result, not a failure
  /// (verify: 1 = a difference above tolerance): they do not start the kill
  /// countdown and are not reported as errors.
  int max_result_code = 0;
};

/// Checks the options every multi-process command has: --nproc in [1, 64]
/// and --timeout-ms > 0 (else frameshard::Error naming the command).
void check_rank_options(
    const std::string& command, int nproc, int64_t timeout_ms);

/// Starts the ranks and waits for all of them. Returns 0 when every rank
/// exited 0, else the largest result code (see RankLaunch) when no rank
/// failed, else 2; each failed rank is described on stderr ("error: verify:
/// rank 2 exited with code 3", "... was killed by signal 9"). Workers die
/// with the parent (PR_SET_PDEATHSIG). Throws frameshard::Error when fork
/// fails (after killing the ranks already started). The workers' stderr is
/// relayed whole lines at a time, each naming its rank (tools/line_relay.h).
int run_rank_processes(const RankLaunch& launch);

/// A worker's body, guarded: an exception becomes "error: [<command> rank
/// r] <message>" on stderr (c10::Error without its C++ backtrace) and exit
/// code 2, so the parent sees a failed rank, never an abort.
int run_worker_guarded(
    const std::string& command, int rank, const std::function<int()>& body);

}  // namespace cli
}  // namespace frameshard
