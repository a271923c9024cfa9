#pragma once
// Buffer: an immutable-once-written block of device memory holding one tensor's elements.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lazytrace/core/error.h"

namespace lazytrace::runtime {

class Buffer {
 public:
  /** 64-byte aligned, uninitialized. `transient`: given back before long (a run's arena),
   * so its memory may be carved out of a larger free block (BlockCache::take). */
  explicit Buffer(size_t bytes, bool transient = false);
  /**
   * Memory someone else owns (zero-copy, lt::from_blob): never freed, never written (no
   * graph is given it to write into) and not counted in live_bytes(); `owner` is released
   * when the buffer dies.
   */
  Buffer(const void* external, size_t bytes, std::shared_ptr<const void> owner);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  /** True for memory someone else owns (see the second constructor). */
  bool external() const { return owner_ != nullptr; }

  /** Bytes held by all live buffers (for memory tests and reports). */
  static int64_t live_bytes();
  /** The most bytes live buffers held at once since the last reset_peak(). */
  static int64_t peak_bytes();
  /** Starts a new peak at the bytes held now. */
  static void reset_peak();
  /** Buffers allocated since the process started. */
  static int64_t allocations();

 private:
  void* data_;
  size_t bytes_;
  size_t block_ = 0;  // the cached block's size (at least bytes_)
  std::shared_ptr<const void> owner_;
};

using BufferPtr = std::shared_ptr<Buffer>;

/** What a Buffer throws when the system has no memory for it: an lt::Error whose message
 * says the bytes; the code that knows which op wanted them says so (rethrow_for). */
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(size_t bytes);
  /** The same failure, said of `purpose` ("the result of matmul, f32[16, 128]"). */
  [[noreturn]] void rethrow_for(const std::string& op, const std::string& purpose) const;
  size_t bytes;
};

/** "4.0 GiB (4294967296 bytes)". */
std::string format_bytes(size_t bytes);

inline BufferPtr make_buffer(size_t bytes, bool transient = false) {
  return std::make_shared<Buffer>(bytes, transient);
}

}  // namespace lazytrace::runtime
