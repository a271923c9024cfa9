#include "runtime/buffer.h"

#include <atomic>
#include <sstream>
#include <utility>

#include "lazytrace/metrics/metrics.h"
#include "runtime/block_cache.h"

namespace lazytrace::runtime {
namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_high_water{0};  // the peak since the process started
std::atomic<int64_t> g_allocations{0};

}  // namespace

Buffer::Buffer(size_t bytes, bool transient) : bytes_(bytes), block_(BlockCache::round(bytes)) {
  data_ = BlockCache::global().take(block_, transient);
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
  BlockCache::global().give(data_, block_,
                            static_cast<size_t>(g_high_water.load(std::memory_order_relaxed)));
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
