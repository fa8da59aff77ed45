#include "line_relay.h"

#include <frameshard/error.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <utility>

namespace frameshard {
namespace cli {
namespace {

// A worker line longer than this is relayed in pieces (bounded memory).
constexpr std::size_t kMaxLine = 64 * 1024;

void write_all(const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(2, p, left);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // stderr is gone: nothing better to do with the line
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace

LineRelay::LineRelay(std::string command, int nproc)
    : command_(std::move(command)),
      read_fds_(nproc, -1),
      write_fds_(nproc, -1),
      pending_(nproc) {
  for (int r = 0; r < nproc; ++r) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      const int err = errno;
      detail::fail(
          command_.c_str(),
          "expected a pipe for rank ",
          r,
          ", got errno ",
          err);
    }
    read_fds_[r] = fds[0];
    write_fds_[r] = fds[1];
  }
}

LineRelay::~LineRelay() {
  for (int fd : read_fds_) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
  close_child_ends();
}

void LineRelay::attach_child(int rank) const {
  ::dup2(write_fds_[rank], 2);  // dup2 clears close-on-exec on fd 2
}

void LineRelay::close_child_ends() {
  for (int& fd : write_fds_) {
    if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
  }
}

void LineRelay::read_from(int rank) {
  char buf[4096];
  const ssize_t n = ::read(read_fds_[rank], buf, sizeof(buf));
  if (n > 0) {
    pending_[rank].append(buf, static_cast<std::size_t>(n));
    relay_lines(rank, false);
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    relay_lines(rank, true);
    ::close(read_fds_[rank]);
    read_fds_[rank] = -1;
  }
}

void LineRelay::relay_lines(int rank, bool flush_partial) {
  std::string& p = pending_[rank];
  const std::string tag =
      "[" + command_ + " rank " + std::to_string(rank) + "]";
  std::size_t start = 0;
  while (start < p.size()) {
    std::size_t end = p.find('\n', start);
    if (end == std::string::npos) {
      if (!flush_partial && p.size() - start < kMaxLine) {
        break;
      }
      end = p.size();
    }
    std::string line = p.substr(start, end - start);
    if (line.find(tag) == std::string::npos) {
      line = tag + " " + line;
    }
    write_all(line + "\n");
    start = end + 1;
  }
  p.erase(0, std::min(start, p.size()));
}

void LineRelay::pump(std::chrono::milliseconds wait) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(read_fds_.size()); ++r) {
    if (read_fds_[r] >= 0) {
      fds.push_back({read_fds_[r], POLLIN, 0});
      ranks.push_back(r);
    }
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(wait);  // every worker closed its stderr
    return;
  }
  if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count())) <= 0) {
    return;
  }
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) {
      read_from(ranks[i]);
    }
  }
}

void LineRelay::drain() {
  for (int r = 0; r < static_cast<int>(read_fds_.size()); ++r) {
    while (read_fds_[r] >= 0) {
      read_from(r);
    }
  }
}

}  // namespace cli
}  // namespace frameshard
