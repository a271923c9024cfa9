#pragma once
// LruCache: values keyed by a 64-bit structural hash, bounded by count, least recently used
// evicted first. The one cache type behind the compile cache, the compiled bodies, and the
// trace caches of assume_pure, compile and scan (DESIGN decision 5: every cache is bounded).
// Not synchronized: each owner guards it with its own lock, which also covers its own
// bookkeeping beside the entries.
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

namespace lazytrace {

template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  /** The value for `key`, now the most recent; nullptr if absent. */
  V* find(uint64_t key) {
    if (order_.empty()) return nullptr;
    // the common case, a loop asking for one key again and again: no hash lookup
    if (order_.front().first == key) return &order_.front().second;
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  /** Stores `value` under `key` (replacing any), as the most recent; returns how many
   * entries the bound evicted. */
  size_t insert(uint64_t key, V value) {
    erase(key);
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    return trim();
  }

  void erase(uint64_t key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  /** Sets the bound (at least 1); returns how many entries it evicted. */
  size_t set_capacity(size_t n) {
    capacity_ = n ? n : 1;
    return trim();
  }

  void clear() {
    order_.clear();
    index_.clear();
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }

  /** Calls f(key, value) for every entry, most recent first. */
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [key, value] : order_) f(key, value);
  }

 private:
  size_t trim() {
    size_t evicted = 0;
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evicted;
    }
    return evicted;
  }

  size_t capacity_;
  std::list<std::pair<uint64_t, V>> order_;  // most recent first
  std::unordered_map<uint64_t, typename std::list<std::pair<uint64_t, V>>::iterator> index_;
};

}  // namespace lazytrace
