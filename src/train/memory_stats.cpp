// Counting CPU allocator and the CUDA caching allocator's statistics.
#include <frameshard/train/memory_stats.h>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#if FRAMESHARD_HAVE_CUDA_ALLOCATOR_STATS
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace frameshard {
namespace train {
namespace {

// Wraps the allocator that was current when installed. It hands out
// "simple" DataPtrs (context == data), which torch requires of a CPU
// allocator (raw_allocate asserts it), and keeps each allocation's size and
// the wrapped DataPtr in a table keyed by the address; freeing erases the
// entry, whose DataPtr frees the memory.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (n == 0 || data == nullptr) {
      return inner;  // nothing to count; no unique address to key on
    }
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.emplace(data, Entry{static_cast<int64_t>(n), std::move(inner)});
    }
    add(static_cast<int64_t>(n));
    return c10::DataPtr(data, data, &CountingAllocator::release, device);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &CountingAllocator::release;
  }

  void copy_data(
      void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  int64_t current() const {
    return current_.load();
  }
  int64_t peak() const {
    return peak_.load();
  }
  void reset_peak() {
    peak_.store(current_.load());
  }

 private:
  struct Entry {
    int64_t bytes;
    c10::DataPtr inner;
  };

  static void release(void* p);

  void add(int64_t n) {
    const int64_t now = current_.fetch_add(n) + n;
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
  }

  c10::Allocator* base_;
  std::mutex mutex_;
  std::unordered_map<void*, Entry> live_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

std::once_flag install_once;
CountingAllocator* counting = nullptr;  // lives for the process

}  // namespace

void install_counting_cpu_allocator() {
  std::call_once(install_once, [] {
    counting = new CountingAllocator(c10::GetCPUAllocator());
    // A priority above c10's default (0) and its mobile/caching variants.
    c10::SetCPUAllocator(counting, /*priority=*/100);
  });
}

void CountingAllocator::release(void* p) {
  CountingAllocator* self = counting;
  Entry entry{0, c10::DataPtr()};
  {
    std::lock_guard<std::mutex> lock(self->mutex_);
    auto it = self->live_.find(p);
    if (it == self->live_.end()) {
      return;  // not ours (cannot happen: only our DataPtrs carry release)
    }
    entry = std::move(it->second);
    self->live_.erase(it);
  }
  self->current_.fetch_sub(entry.bytes);
  // entry.inner frees the memory as it goes out of scope.
}

bool counting_cpu_allocator_installed() {
  return counting != nullptr;
}

MemoryStats::MemoryStats(c10::Device device) : device_(device) {}

#if FRAMESHARD_HAVE_CUDA_ALLOCATOR_STATS
namespace {
struct CudaBytes {
  int64_t current = 0;
  int64_t peak = 0;
};
CudaBytes cuda_allocated(c10::DeviceIndex d) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d);
  const auto& s = stats.allocated_bytes[static_cast<size_t>(
      c10::CachingAllocator::StatType::AGGREGATE)];
  return CudaBytes{s.current, s.peak};
}
}  // namespace
#endif

int64_t MemoryStats::current_bytes() const {
#if FRAMESHARD_HAVE_CUDA_ALLOCATOR_STATS
  if (device_.is_cuda()) {
    return cuda_allocated(device_.index()).current;
  }
#endif
  return device_.is_cpu() && counting ? counting->current() : 0;
}

int64_t MemoryStats::peak_bytes() const {
#if FRAMESHARD_HAVE_CUDA_ALLOCATOR_STATS
  if (device_.is_cuda()) {
    return cuda_allocated(device_.index()).peak;
  }
#endif
  return device_.is_cpu() && counting ? counting->peak() : 0;
}

void MemoryStats::reset_peak() {
#if FRAMESHARD_HAVE_CUDA_ALLOCATOR_STATS
  if (device_.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
    return;
  }
#endif
  if (counting) {
    counting->reset_peak();
  }
}

bool MemoryStats::available() const {
#if FRAMESHARD_HAVE_CUDA_ALLOCATOR_STATS
  if (device_.is_cuda()) {
    return true;
  }
#endif
  return device_.is_cpu() && counting != nullptr;
}

}  // namespace train
}  // namespace frameshard
