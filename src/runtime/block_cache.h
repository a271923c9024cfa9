#pragma once
// BlockCache: freed buffer memory kept and handed out again, so a step that repeats gets its
// memory back without asking the system (and without page faults), as PyTorch's caching
// allocator does.
//
// Small blocks (under 4 MiB) are kept by exact size. Large ones are spans of regions asked of
// the system, 2 MiB-aligned and backed by transparent huge pages where the kernel gives them.
// A request takes the smallest free span that holds it, split when larger, and a freed span
// joins the free spans beside it in its region (as XLA's BFC allocator), so that programs run
// at many shapes (batches of varying length) share one region the size of the largest arena
// instead of each keeping its own; a request that nothing free holds first returns the wholly
// free regions of its kind smaller than it (the new one serves what they could). Transient
// requests (a run's arena, given back when the run ends) and tensors (which may live long)
// take spans of separate regions: a long-lived tensor carved out of an arena's region would
// keep that region from being whole again, and the next arena would need another.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace lazytrace::runtime {

class BlockCache {
 public:
  struct Options {
    /** Free bytes kept at most: `limit`, or when not `fixed` the larger of it and the most
     * bytes ever live (a training step whose weights and moments exceed it reuses them too). */
    size_t limit = size_t{1} << 30;
    bool fixed = false;
    /** Large free spans split to serve smaller requests (off: every request takes a wholly
     * free region at most a quarter larger than asked). */
    bool split = true;
  };
  /** LAZYTRACE_BUFFER_CACHE_MB (the limit, fixed) and LAZYTRACE_BUFFER_SPLIT=0. */
  static Options options_from_env();

  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeFrom = size_t{4} << 20;  // blocks from here are spans

  explicit BlockCache(Options options) : options_(options) {}
  /** Returns every block to the system; nothing taken may still be in use. */
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /** `bytes` rounded as take() expects it: 64 bytes, 4 KiB or 2 MiB units by size. */
  static size_t round(size_t bytes);
  /** A block of at least `rounded` bytes (a round() result); `rounded` becomes its size.
   * `transient`: given back soon (a run's arena; see the top). */
  void* take(size_t& rounded, bool transient = false);
  /** Hands back a block take() gave, with the size it set; `high_water` is the most bytes
   * ever live (the limit when not fixed). */
  void give(void* p, size_t rounded, size_t high_water);

  /** Free bytes held for reuse. */
  size_t cached_bytes() const;
  /** Bytes held from the system, in use or free. */
  size_t system_bytes() const;

  /** The process's cache (options from the environment), never destroyed: buffers may die
   * during static teardown. */
  static BlockCache& global();

 private:
  struct Span {
    size_t size;
    char* region;
    bool free;
  };
  void* take_span(size_t& rounded, bool transient);
  char* give_span(char* p);
  void trim(size_t limit, size_t keep_size, char* keep_region);
  enum Kind { kAny, kArenas, kTensors };
  void release_regions(size_t limit, char* keep_region, size_t below = SIZE_MAX, Kind kind = kAny);
  void* system_alloc(size_t bytes);
  void system_free(void* p, size_t bytes);

  const Options options_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> small_;     // free small blocks by size, oldest first
  std::map<char*, Span> spans_;                    // every span of every region, by address
  std::set<std::pair<size_t, char*>> free_spans_;  // the free ones by size
  struct Region {
    size_t size;
    bool arena;  // made for a transient request: only those split it
  };
  std::map<char*, Region> regions_;  // by start
  // Whether the free span (size, start) is a whole region.
  bool whole_region(const std::pair<size_t, char*>& span) const;
  size_t cached_ = 0;
  size_t system_ = 0;
};

}  // namespace lazytrace::runtime
