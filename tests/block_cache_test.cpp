// The buffer cache: blocks handed out again, large spans split and joined, the limit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/block_cache.h"

namespace {

using lazytrace::runtime::BlockCache;
constexpr size_t kMiB = size_t{1} << 20;

BlockCache::Options options(size_t limit_mib, bool split = true) {
  BlockCache::Options o;
  o.limit = limit_mib * kMiB;
  o.fixed = true;
  o.split = split;
  return o;
}

// `transient`: a run's arena (may be split out of a larger span)
void* take(BlockCache& cache, size_t bytes, size_t* got = nullptr, bool transient = true) {
  size_t rounded = BlockCache::round(bytes);
  void* p = cache.take(rounded, transient);
  if (got) *got = rounded;
  return p;
}

TEST(BlockCache, RoundsToUnitsBySize) {
  EXPECT_EQ(BlockCache::round(0), 64u);
  EXPECT_EQ(BlockCache::round(65), 128u);
  EXPECT_EQ(BlockCache::round(4097), 8192u);
  EXPECT_EQ(BlockCache::round(4 * kMiB), 4 * kMiB);
  EXPECT_EQ(BlockCache::round(4 * kMiB + 1), 6 * kMiB);
}

TEST(BlockCache, SmallBlocksComeBackAtTheirExactSize) {
  BlockCache cache(options(64));
  size_t got = 0;
  void* a = take(cache, 1000, &got);
  EXPECT_EQ(got, 1024u);
  cache.give(a, got, 0);
  EXPECT_EQ(cache.cached_bytes(), 1024u);
  EXPECT_EQ(take(cache, 1000), a);  // the same block again
  void* b = take(cache, 2000);      // another size: a new block
  EXPECT_NE(b, a);
  EXPECT_EQ(cache.system_bytes(), 1024u + 2048u);
  cache.give(a, 1024, 0);
  cache.give(b, 2048, 0);
}

TEST(BlockCache, SmallerLargeRequestsShareOneRegion) {
  // arenas of programs at many shapes: each fits in the largest one's region
  BlockCache cache(options(1024));
  size_t got = 0;
  void* big = take(cache, 40 * kMiB, &got);
  std::memset(big, 1, got);
  cache.give(big, got, 0);
  const size_t held = cache.system_bytes();
  EXPECT_EQ(held, 40 * kMiB);
  for (size_t mib : {8, 20, 38, 6, 40, 12}) {
    size_t n = 0;
    void* p = take(cache, mib * kMiB, &n);
    EXPECT_EQ(p, big) << mib << " MiB";
    EXPECT_EQ(n, mib * kMiB);
    std::memset(p, 2, n);
    cache.give(p, n, 0);
    EXPECT_EQ(cache.cached_bytes(), 40 * kMiB) << "joined again whole";
  }
  EXPECT_EQ(cache.system_bytes(), held);
}

// A long-lived tensor never takes part of a free arena's region (it would keep the region
// from being whole, and the next arena would need a new one): tensors and arenas split
// regions of their own kind.
TEST(BlockCache, TensorsAndArenasTakeSpansOfSeparateRegions) {
  BlockCache cache(options(1024));
  size_t n = 0;
  void* arena = take(cache, 100 * kMiB, &n);
  cache.give(arena, n, 0);
  std::vector<std::pair<void*, size_t>> moments;
  for (int i = 0; i < 4; ++i) {
    size_t m = 0;
    void* p = take(cache, 8 * kMiB, &m, /*transient=*/false);
    EXPECT_EQ(m, 8 * kMiB);
    EXPECT_FALSE(p >= arena && p < static_cast<char*>(arena) + 100 * kMiB) << i;
    moments.emplace_back(p, m);
  }
  const size_t held = cache.system_bytes();
  for (int step = 0; step < 3; ++step) {
    void* again = take(cache, 100 * kMiB, &n);
    EXPECT_EQ(again, arena) << "step " << step;
    cache.give(again, n, 0);
  }
  EXPECT_EQ(cache.system_bytes(), held);
  for (auto [p, m] : moments) cache.give(p, m, 0);
  // a tensor nothing free of its kind holds returns the smaller wholly free tensors' regions
  // (the moments'), never the arena's
  size_t before = cache.system_bytes();
  void* t = take(cache, 84 * kMiB, &n, false);
  EXPECT_NE(t, arena);
  EXPECT_EQ(n, 84 * kMiB);
  EXPECT_EQ(cache.system_bytes(), before - 32 * kMiB + 84 * kMiB);
  cache.give(t, n, 0);
  void* u = take(cache, 20 * kMiB, &n, false);  // split out of the tensor region
  EXPECT_EQ(u, t);
  EXPECT_EQ(n, 20 * kMiB);
  cache.give(u, n, 0);
  // an arena nothing free holds returns the smaller arenas' regions, not the tensors'
  before = cache.system_bytes();
  void* big = take(cache, 200 * kMiB, &n);
  EXPECT_EQ(cache.system_bytes(), before - 100 * kMiB + 200 * kMiB);
  cache.give(big, n, 0);
}

TEST(BlockCache, GrowingRequestsHoldOneRegion) {
  // a model compiled for ever longer batches: each larger arena's region replaces the
  // smaller wholly free ones, which it serves from then on
  BlockCache cache(options(4096));
  for (size_t mib = 8; mib <= 64; mib += 8) {
    size_t n = 0;
    void* p = take(cache, mib * kMiB, &n);
    cache.give(p, n, 0);
    EXPECT_EQ(cache.system_bytes(), mib * kMiB) << mib << " MiB";
  }
  size_t n = 0;
  void* kept = take(cache, 8 * kMiB, &n);  // in use: its region stays
  void* p = take(cache, 80 * kMiB, &n);
  EXPECT_EQ(cache.system_bytes(), 64 * kMiB + 80 * kMiB);
  cache.give(p, n, 0);
  cache.give(kept, 8 * kMiB, 0);
}

TEST(BlockCache, WithoutSplittingASpanServesOnlyRequestsUpToAQuarterSmaller) {
  BlockCache cache(options(1024, /*split=*/false));
  size_t got = 0;
  void* big = take(cache, 40 * kMiB, &got);
  cache.give(big, got, 0);
  size_t n = 0;
  void* near = take(cache, 34 * kMiB, &n);
  EXPECT_EQ(near, big);
  EXPECT_EQ(n, 40 * kMiB);  // taken whole
  cache.give(near, n, 0);
  void* far = take(cache, 8 * kMiB, &n);
  EXPECT_NE(far, big);
  EXPECT_EQ(cache.system_bytes(), 48 * kMiB);
  cache.give(far, n, 0);
}

TEST(BlockCache, SpansInUseNeverOverlapAndFreedOnesJoin) {
  // a random sequence of takes and gives against a model of which bytes are in use
  BlockCache cache(options(4096));
  std::mt19937 rng(7);
  struct Held {
    char* p;
    size_t n;
    uint8_t tag;
  };
  std::vector<Held> held;
  for (int step = 0; step < 2000; ++step) {
    if (held.size() < 12 && (held.empty() || rng() % 2)) {
      size_t n = 0;
      char* p = static_cast<char*>(take(cache, (4 + rng() % 60) * kMiB + rng() % kMiB, &n));
      const auto tag = static_cast<uint8_t>(step);
      for (size_t k = 0; k < n; k += 4096) p[k] = static_cast<char>(tag);
      held.push_back({p, n, tag});
    } else {
      const size_t i = rng() % held.size();
      const Held h = held[i];
      for (size_t k = 0; k < h.n; k += 4096)  // nobody else wrote into it
        ASSERT_EQ(static_cast<uint8_t>(h.p[k]), h.tag) << "step " << step;
      cache.give(h.p, h.n, 0);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (const Held& h : held) cache.give(h.p, h.n, 0);
  EXPECT_EQ(cache.cached_bytes(), cache.system_bytes()) << "every span free again";
}

TEST(BlockCache, KeepsAtMostItsLimitAndReturnsWhollyFreeRegions) {
  BlockCache cache(options(50));
  size_t na = 0, nb = 0, nc = 0;
  void* a = take(cache, 30 * kMiB, &na);
  void* b = take(cache, 20 * kMiB, &nb);
  void* c = take(cache, 10 * kMiB, &nc);
  cache.give(c, nc, 0);
  cache.give(b, nb, 0);
  EXPECT_EQ(cache.cached_bytes(), 30 * kMiB);
  cache.give(a, na, 0);  // 60 MiB free: the smallest region goes back to the system
  EXPECT_EQ(cache.cached_bytes(), 50 * kMiB);
  EXPECT_EQ(cache.system_bytes(), 50 * kMiB);
  // not fixed: the limit is at least the most bytes ever live
  BlockCache::Options o = options(1);
  o.fixed = false;
  BlockCache grows(o);
  size_t n = 0;
  void* p = take(grows, 30 * kMiB, &n);
  grows.give(p, n, 30 * kMiB);
  EXPECT_EQ(grows.cached_bytes(), 30 * kMiB);
  p = take(grows, 30 * kMiB, &n);
  grows.give(p, n, 0);
  EXPECT_EQ(grows.cached_bytes(), 0u);
}

TEST(BlockCache, SmallBlocksMakeRoomForOthersFirst) {
  BlockCache cache(options(1));  // 1 MiB
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(take(cache, 64 * 1024));
  for (void* p : blocks) cache.give(p, 64 * 1024, 0);
  EXPECT_EQ(cache.cached_bytes(), kMiB);  // 16 blocks of 64 KiB
  size_t n = 0;
  void* other = take(cache, 128 * 1024, &n);
  cache.give(other, n, 0);  // the workload changed: the oldest 64 KiB blocks make room
  EXPECT_EQ(cache.cached_bytes(), kMiB);
  EXPECT_EQ(take(cache, 128 * 1024), other);
  cache.give(other, n, 0);
}

}  // namespace
