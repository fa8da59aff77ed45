// File: frameshard/train/memory_stats.h
//
// Peak bytes allocated by tensors, the figure the A/B compares (not process
// RSS, which also counts the allocator's cache, code and Gloo's buffers):
//   * CPU: a counting allocator installed in front of c10's CPU allocator
//     (install_counting_cpu_allocator, once per process, before the tensors
//     to be counted are made); it tracks the bytes live and their peak.
//   * CUDA: the caching allocator's allocated_bytes statistics of the
//     current device (builds with a CUDA torch).
// Both count every tensor of the process, so with ranks as threads of one
// process (the tests) the figures are of the whole process.
//
// Usage:
//   frameshard::train::install_counting_cpu_allocator();
//   frameshard::train::MemoryStats mem(device);
//   mem.reset_peak();               // peak := bytes live now
//   ... run a step ...
//   int64_t peak = mem.peak_bytes();
//
// No call here is collective.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace frameshard {
namespace train {

/// Puts the counting allocator in front of c10's CPU allocator; idempotent
/// and thread-safe. Tensors allocated before are not counted.
void install_counting_cpu_allocator();
/// Whether install_counting_cpu_allocator has run in this process.
bool counting_cpu_allocator_installed();

class MemoryStats {
 public:
  explicit MemoryStats(c10::Device device);
  /// Bytes allocated by live tensors on the device now.
  int64_t current_bytes() const;
  /// Largest current_bytes() since the last reset_peak().
  int64_t peak_bytes() const;
  /// Starts a new peak window at the current bytes.
  void reset_peak();
  /// False on a CPU without the counting allocator (then all figures are 0).
  bool available() const;

 private:
  c10::Device device_;
};

}  // namespace train
}  // namespace frameshard
