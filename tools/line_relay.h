// The workers' stderr, relayed by the launching parent whole lines at a time
// (tools/rank_processes.cpp). Each worker writes into its own pipe; the
// parent writes every complete line to its stderr with one write(2), so two
// ranks' error lines never interleave mid-line. A line that does not already
// name its rank ("[<command> rank r]") is prefixed with it.
//
// Usage (parent):
//   LineRelay relay("encode", nproc);      // the pipes
//   fork(); in the child: relay.attach_child(r);  (stderr -> pipe r)
//   relay.close_child_ends();               // in the parent, after the forks
//   while (...) relay.pump(std::chrono::milliseconds(20));
//   relay.drain();                          // after every worker exited
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace frameshard {
namespace cli {

class LineRelay {
 public:
  /// Throws frameshard::Error naming `command` when a pipe cannot be made.
  LineRelay(std::string command, int nproc);
  ~LineRelay();
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  /// In the forked child of rank `rank`: its stderr becomes the pipe (the
  /// other ends are close-on-exec).
  void attach_child(int rank) const;
  /// In the parent once every child is started: closes the write ends, so
  /// a pipe reaches end-of-file when its worker exits.
  void close_child_ends();
  /// Waits up to `wait` for output, then relays every complete line read.
  void pump(std::chrono::milliseconds wait);
  /// Reads every pipe to its end and relays what is left (a last line
  /// without a newline gets one).
  void drain();

 private:
  void read_from(int rank);
  void relay_lines(int rank, bool flush_partial);

  std::string command_;
  std::vector<int> read_fds_;
  std::vector<int> write_fds_;
  std::vector<std::string> pending_;
};

}  // namespace cli
}  // namespace frameshard
