#pragma once
// Buffer: an immutable-once-written block of device memory holding one tensor's elements.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace lazytrace::runtime {

class Buffer {
 public:
  /** 64-byte aligned, uninitialized. */
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

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
};

using BufferPtr = std::shared_ptr<Buffer>;

inline BufferPtr make_buffer(size_t bytes) {
  return std::make_shared<Buffer>(bytes);
}

}  // namespace lazytrace::runtime
