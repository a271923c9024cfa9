#include "runtime/block_cache.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "runtime/buffer.h"

namespace lazytrace::runtime {

BlockCache::Options BlockCache::options_from_env() {
  Options o;
  if (const char* e = std::getenv("LAZYTRACE_BUFFER_CACHE_MB")) {
    o.limit = static_cast<size_t>(std::strtoull(e, nullptr, 10)) << 20;
    o.fixed = true;
  }
  if (const char* e = std::getenv("LAZYTRACE_BUFFER_SPLIT")) o.split = std::strcmp(e, "0") != 0;
  return o;
}

BlockCache& BlockCache::global() {
  static BlockCache* c = new BlockCache(options_from_env());
  return *c;
}

BlockCache::~BlockCache() {
  for (auto& [size, blocks] : small_)
    for (void* p : blocks) std::free(p);
  for (auto& [start, region] : regions_) std::free(start);
}

size_t BlockCache::round(size_t bytes) {
  size_t unit = bytes <= 4096 ? 64 : bytes < kHugeFrom ? 4096 : kHugePage;
  return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

size_t BlockCache::system_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return system_;
}

// Called without the lock. A failure first returns every free block to the system and
// tries again (the memory may be cached here).
void* BlockCache::system_alloc(size_t bytes) {
  const bool huge = bytes >= kHugeFrom;
  void* p = std::aligned_alloc(huge ? kHugePage : 64, bytes);
  if (!p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      trim(0, 0, nullptr);
    }
    p = std::aligned_alloc(huge ? kHugePage : 64, bytes);
    if (!p) throw OutOfMemory(bytes);
  }
#ifdef MADV_HUGEPAGE
  // As PyTorch's CPU allocator does with THP: a scan reads each stacked weight a slice per
  // iteration, and on 4 KiB pages every 4 KiB of a slice is a TLB miss and a stop for the
  // hardware prefetcher.
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  std::lock_guard<std::mutex> lock(mu_);
  system_ += bytes;
  return p;
}

void BlockCache::system_free(void* p, size_t bytes) {
  std::free(p);
  system_ -= bytes;
}

void* BlockCache::take(size_t& rounded, bool transient) {
  if (rounded >= kHugeFrom) return take_span(rounded, transient);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = small_.find(rounded);
    if (it != small_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= rounded;
      return p;
    }
  }
  return system_alloc(rounded);
}

void* BlockCache::take_span(size_t& rounded, bool transient) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool split = options_.split;
    auto it = free_spans_.lower_bound({rounded, nullptr});
    if (split) {  // the smallest free span of its own kind of region (arenas' or tensors')
      while (it != free_spans_.end() &&
             regions_.at(spans_.at(it->second).region).arena != transient)
        ++it;
    } else {  // a wholly free region at most a quarter larger
      const size_t most = rounded + rounded / 4;
      while (it != free_spans_.end() && it->first <= most && !whole_region(*it)) ++it;
      if (it != free_spans_.end() && it->first > most) it = free_spans_.end();
    }
    if (it != free_spans_.end()) {
      const auto [size, p] = *it;
      free_spans_.erase(it);
      Span& s = spans_.at(p);
      s.free = false;
      if (split && size > rounded) {  // the rest stays free, in its own span
        s.size = rounded;
        spans_.emplace(p + rounded, Span{size - rounded, s.region, true});
        free_spans_.insert({size - rounded, p + rounded});
      } else {
        rounded = size;
      }
      cached_ -= rounded;
      return p;
    }
    // Nothing free holds it: the wholly free regions of its kind smaller than it go back to
    // the system, since the new region will serve what they could once it is free (shapes
    // that grow, as a model compiled for ever longer batches, then hold one region, not one
    // per shape).
    if (split) release_regions(0, nullptr, rounded, transient ? kArenas : kTensors);
  }
  char* p = static_cast<char*>(system_alloc(rounded));
  std::lock_guard<std::mutex> lock(mu_);
  regions_.emplace(p, Region{rounded, transient});
  spans_.emplace(p, Span{rounded, p, false});
  return p;
}

void BlockCache::give(void* p, size_t rounded, size_t high_water) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t limit = options_.fixed ? options_.limit : std::max(options_.limit, high_water);
  if (rounded >= kHugeFrom) {
    char* region = give_span(static_cast<char*>(p));
    // over the limit: other wholly free regions make room, then small blocks, then its own
    if (cached_ > limit) release_regions(limit, region);
    if (cached_ > limit) trim(limit, 0, region);
    if (cached_ > limit) release_regions(limit, nullptr);
    return;
  }
  small_[rounded].push_back(p);
  cached_ += rounded;
  trim(limit, rounded, nullptr);  // other sizes make room first (the workload has changed)
  if (cached_ > limit) {
    small_[rounded].pop_back();
    cached_ -= rounded;
    system_free(p, rounded);
  }
}

bool BlockCache::whole_region(const std::pair<size_t, char*>& span) const {
  auto r = regions_.find(span.second);
  return r != regions_.end() && r->second.size == span.first;
}

// Joins the freed span with the free spans beside it in its region; returns the region.
char* BlockCache::give_span(char* p) {
  auto it = spans_.find(p);
  char* region = it->second.region;
  it->second.free = true;
  cached_ += it->second.size;
  auto next = std::next(it);
  if (next != spans_.end() && next->second.free && next->second.region == it->second.region) {
    free_spans_.erase({next->second.size, next->first});
    it->second.size += next->second.size;
    spans_.erase(next);
  }
  if (it != spans_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.region == it->second.region) {
      free_spans_.erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      spans_.erase(it);
      it = prev;
    }
  }
  free_spans_.insert({it->second.size, it->first});
  return region;
}

// Returns free blocks to the system until at most `limit` bytes are cached: small blocks of
// sizes other than `keep_size` (oldest first), then wholly free regions other than
// `keep_region`.
void BlockCache::trim(size_t limit, size_t keep_size, char* keep_region) {
  for (auto it = small_.begin(); cached_ > limit && it != small_.end();) {
    if (it->first == keep_size) {
      ++it;
      continue;
    }
    auto& blocks = it->second;
    size_t n = 0;
    for (; n < blocks.size() && cached_ > limit; ++n) {
      system_free(blocks[n], it->first);
      cached_ -= it->first;
    }
    blocks.erase(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(n));
    it = blocks.empty() ? small_.erase(it) : std::next(it);
  }
  if (cached_ > limit) release_regions(limit, keep_region);
}

// Returns wholly free regions of `kind` smaller than `below`, other than `keep_region`, to the
// system until at most `limit` bytes are cached, smallest first (the largest serve the most
// requests).
void BlockCache::release_regions(size_t limit, char* keep_region, size_t below, Kind kind) {
  std::vector<std::pair<size_t, char*>> whole;
  for (const auto& [start, r] : regions_) {
    const Span& s = spans_.at(start);
    if (s.free && s.size == r.size && r.size < below && start != keep_region &&
        (kind == kAny || r.arena == (kind == kArenas)))
      whole.emplace_back(r.size, start);
  }
  std::sort(whole.begin(), whole.end());
  for (const auto& [size, start] : whole) {
    if (cached_ <= limit) break;
    free_spans_.erase({size, start});
    spans_.erase(start);
    regions_.erase(start);
    cached_ -= size;
    system_free(start, size);
  }
}

}  // namespace lazytrace::runtime
