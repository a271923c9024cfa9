#include "runtime/buffer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace lazytrace::runtime {
namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_allocations{0};

// Freed blocks are kept by size and handed out again, so a step that repeats gets its
// output memory back without asking the system (and without page faults), as PyTorch's
// caching allocator does. The cache holds at most LAZYTRACE_BUFFER_CACHE_MB (default 1024).
class BlockCache {
 public:
  static size_t round(size_t bytes) {
    size_t unit = bytes <= 4096 ? 64 : 4096;
    return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
  }

  void* take(size_t rounded) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }

  void give(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + rounded > limit_) {
      std::free(p);
      return;
    }
    free_[rounded].push_back(p);
    cached_ += rounded;
  }

  static BlockCache& get() {
    static BlockCache* c = new BlockCache();  // leaked: buffers may die during static teardown
    return *c;
  }

 private:
  BlockCache() {
    size_t mb = 1024;
    if (const char* e = std::getenv("LAZYTRACE_BUFFER_CACHE_MB"))
      mb = std::strtoull(e, nullptr, 10);
    limit_ = mb << 20;
  }
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = 0;
};

}  // namespace

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  data_ = BlockCache::get().take(BlockCache::round(bytes));
  const int64_t live =
      g_live_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
      static_cast<int64_t>(bytes);
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  g_allocations.fetch_add(1, std::memory_order_relaxed);
}

Buffer::~Buffer() {
  BlockCache::get().give(data_, BlockCache::round(bytes_));
  g_live_bytes.fetch_sub(static_cast<int64_t>(bytes_), std::memory_order_relaxed);
}

int64_t Buffer::allocations() {
  return g_allocations.load(std::memory_order_relaxed);
}

int64_t Buffer::peak_bytes() {
  return g_peak_bytes.load(std::memory_order_relaxed);
}

void Buffer::reset_peak() {
  g_peak_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

int64_t Buffer::live_bytes() {
  return g_live_bytes.load(std::memory_order_relaxed);
}

}  // namespace lazytrace::runtime
