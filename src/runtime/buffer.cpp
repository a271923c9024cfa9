#include "runtime/buffer.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace lazytrace::runtime {
namespace {
std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_allocations{0};
}

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!data_) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  g_allocations.fetch_add(1, std::memory_order_relaxed);
}

Buffer::~Buffer() {
  std::free(data_);
  g_live_bytes.fetch_sub(static_cast<int64_t>(bytes_), std::memory_order_relaxed);
}

int64_t Buffer::allocations() { return g_allocations.load(std::memory_order_relaxed); }

int64_t Buffer::live_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }

}  // namespace lazytrace::runtime
