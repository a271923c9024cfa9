#include "runtime/buffer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "lazytrace/metrics/metrics.h"

namespace lazytrace::runtime {
namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_high_water{0};  // the peak since the process started
std::atomic<int64_t> g_allocations{0};

// Freed blocks are kept by size and handed out again, so a step that repeats gets its
// output memory back without asking the system (and without page faults), as PyTorch's
// caching allocator does. The cache holds at most LAZYTRACE_BUFFER_CACHE_MB if set; by
// default 1 GiB or, when more, the most bytes ever live at once: a training step whose
// weights and optimizer state are larger reuses them too (a step frees what the next one
// allocates again).
class BlockCache {
 public:
  // Blocks from 4 MiB (a stacked weight, its moments) are 2 MiB-aligned and asked to be
  // backed by transparent huge pages, as PyTorch's CPU allocator does with THP: a scan reads
  // each stacked weight a slice per iteration, and on 4 KiB pages every 4 KiB of a slice is
  // a TLB miss and a stop for the hardware prefetcher.
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeFrom = size_t{4} << 20;

  static size_t round(size_t bytes) {
    size_t unit = bytes <= 4096 ? 64 : bytes < kHugeFrom ? 4096 : kHugePage;
    return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
  }

  // A block of at least `rounded` bytes; `rounded` becomes its size. A large one may be a
  // cached block up to a quarter larger: the arenas of steps at nearby shapes (batches of
  // varying length) then share blocks instead of each asking the system for new pages.
  void* take(size_t& rounded) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t most = rounded >= kHugeFrom ? rounded + rounded / 4 : rounded;
      for (auto it = free_.lower_bound(rounded); it != free_.end() && it->first <= most; ++it) {
        if (it->second.empty()) continue;
        void* p = it->second.back();
        it->second.pop_back();
        rounded = it->first;
        cached_ -= rounded;
        return p;
      }
    }
    const bool huge = rounded >= kHugeFrom;
    void* p = std::aligned_alloc(huge ? kHugePage : 64, rounded);
    if (!p) throw OutOfMemory(rounded);
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
  }

  void give(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t limit =
        fixed_
            ? limit_
            : std::max(limit_, static_cast<size_t>(g_high_water.load(std::memory_order_relaxed)));
    // over the limit: the blocks kept longest of other sizes make room (the workload has
    // changed, e.g. another model), else the block is returned to the system
    for (auto it = free_.begin(); cached_ + rounded > limit && it != free_.end();) {
      if (it->first == rounded) {
        ++it;
        continue;
      }
      while (!it->second.empty() && cached_ + rounded > limit) {
        std::free(it->second.front());
        it->second.erase(it->second.begin());
        cached_ -= it->first;
      }
      it = it->second.empty() ? free_.erase(it) : std::next(it);
    }
    if (cached_ + rounded > limit) {
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
    if (const char* e = std::getenv("LAZYTRACE_BUFFER_CACHE_MB")) {
      mb = std::strtoull(e, nullptr, 10);
      fixed_ = true;
    }
    limit_ = mb << 20;
  }
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = 0;
  bool fixed_ = false;
};

}  // namespace

Buffer::Buffer(size_t bytes) : bytes_(bytes), block_(BlockCache::round(bytes)) {
  data_ = BlockCache::get().take(block_);
  const int64_t live =
      g_live_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
      static_cast<int64_t>(bytes);
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak &&
         !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  int64_t high = g_high_water.load(std::memory_order_relaxed);
  while (live > high &&
         !g_high_water.compare_exchange_weak(high, live, std::memory_order_relaxed)) {
  }
  g_allocations.fetch_add(1, std::memory_order_relaxed);
}

Buffer::Buffer(const void* external, size_t bytes, std::shared_ptr<const void> owner)
    : data_(const_cast<void*>(external)), bytes_(bytes), owner_(std::move(owner)) {
  if (!owner_) owner_ = std::shared_ptr<const void>(external, [](const void*) {});
}

std::string format_bytes(size_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  if (u == 0) {
    os << bytes << " bytes";
  } else {
    os.precision(1);
    os << std::fixed << v << " " << units[u] << " (" << bytes << " bytes)";
  }
  return os.str();
}

namespace {
std::string out_of_memory_text(const std::string& purpose, size_t bytes) {
  return detail::cat("cannot allocate ", format_bytes(bytes), purpose.empty() ? "" : " for ",
                     purpose, ": the system has no memory for it (",
                     format_bytes(static_cast<size_t>(g_live_bytes.load())),
                     " held by live tensors). Make the tensor smaller, or free tensors the "
                     "program no longer needs.");
}
}  // namespace

OutOfMemory::OutOfMemory(size_t b)
    : Error(detail::cat("[alloc] ", out_of_memory_text("", b))), bytes(b) {}

void OutOfMemory::rethrow_for(const std::string& op, const std::string& purpose) const {
  throw Error(detail::cat("[", op, "] ", out_of_memory_text(purpose, bytes)));
}

Buffer::~Buffer() {
  if (owner_) return;
  BlockCache::get().give(data_, block_);
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

namespace lazytrace::metrics {

int64_t memory_bytes() {
  return runtime::Buffer::live_bytes();
}
int64_t peak_memory_bytes() {
  return runtime::Buffer::peak_bytes();
}
void reset_peak_memory() {
  runtime::Buffer::reset_peak();
}

}  // namespace lazytrace::metrics
