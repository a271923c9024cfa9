#pragma once
/**
 * The train()/eval() flags a traced function reads, as guards. A function traced once and
 * replayed (assume_pure, compile, scan with is_fn_pure, scan_layers with is_layer_pure) has
 * the flags of its trace built in (dropout on or off), so each cache keys its traces also on
 * the flags it has seen its function read, as torch.compile guards on module.training: while
 * every such flag is as it was first read the key is unchanged; where some have flipped, the
 * cache finds or makes the trace for that combination.
 */
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace lazytrace::tools {

/** A module's train()/eval() flag, shared with the guards that saw it read. */
using ModeFlag = std::shared_ptr<const bool>;

class ModeGuard {
 public:
  /** 0 while every flag seen is as it was first read, else a hash of which have flipped. */
  uint64_t flipped() const;
  /** Adds a flag (with its value now) if it is new to this guard. */
  void add(const ModeFlag& flag);
  /** Adds every flag `other` has seen. */
  void add_all(const ModeGuard& other);
  bool empty() const { return !any_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> any_{false};  // the per-call test, without the lock
  mutable std::mutex mu_;
  std::vector<std::pair<ModeFlag, bool>> flags_;  // each flag, with its value when first seen
};

/**
 * While alive, the flags read on this thread (Module::is_training) are added to `guard` and
 * to every recording active around it: an enclosing trace depends on them too.
 */
class ModeRecording {
 public:
  explicit ModeRecording(ModeGuard& guard);
  ~ModeRecording();
  ModeRecording(const ModeRecording&) = delete;
  ModeRecording& operator=(const ModeRecording&) = delete;
};

/**
 * A cache's key for this call: `key` as it is while no flag its function read has flipped,
 * else mixed with the flipped ones. Also tells the recordings active around the call (an
 * enclosing trace) which flags the function reads, though a cache hit will not read them.
 */
uint64_t key_with_modes(uint64_t key, const ModeGuard& guard);

namespace detail {
/** How many ModeRecordings are active on this thread (the inline check of is_training). */
extern thread_local int g_mode_recordings;
void note_mode_read(const ModeFlag& flag);
}  // namespace detail

}  // namespace lazytrace::tools
