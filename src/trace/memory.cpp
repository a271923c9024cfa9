// Zero-copy creation from memory someone else owns or from a writer, and the host memory of a
// tensor.
#include "lazytrace/trace/memory.h"

#include <cstdint>
#include <cstring>

#include "trace/tensor_impl.h"

namespace lazytrace {

Tensor from_blob(const void* data, const Shape& shape, DType dtype,
                 std::shared_ptr<const void> owner) {
  const size_t item = itemsize(dtype);
  const auto bytes = static_cast<size_t>(shape.numel()) * item;
  if (!data && bytes > 0)
    fail("from_blob", "got a null pointer for ", dtype_short(dtype), shape.str(),
         "; pass the address of the first element.");
  if (reinterpret_cast<uintptr_t>(data) % item != 0)
    fail("from_blob", "the memory of ", dtype_short(dtype), shape.str(), " is not aligned to its ",
         item, "-byte elements; copy it first.");
  auto buffer = std::make_shared<runtime::Buffer>(data, bytes, std::move(owner));
  return trace::make_materialized(std::move(buffer), dtype, shape);
}

Tensor copy_from(const void* data, const Shape& shape, DType dtype) {
  const auto bytes = static_cast<size_t>(shape.numel()) * itemsize(dtype);
  if (!data && bytes > 0)
    fail("copy_from", "got a null pointer for ", dtype_short(dtype), shape.str(),
         "; pass the address of the first element.");
  runtime::BufferPtr buffer = runtime::make_buffer(bytes);
  if (bytes > 0) std::memcpy(buffer->data(), data, bytes);
  return trace::make_materialized(std::move(buffer), dtype, shape);
}

Tensor from_writer(const Shape& shape, DType dtype,
                   const std::function<void(void* data, size_t nbytes)>& write) {
  if (!write) fail("from_writer", "got an empty function; pass one that writes the elements.");
  const auto bytes = static_cast<size_t>(shape.numel()) * itemsize(dtype);
  runtime::BufferPtr buffer = runtime::make_buffer(bytes);
  write(buffer->data(), bytes);
  return trace::make_materialized(std::move(buffer), dtype, shape);
}

std::shared_ptr<const void> host_data(const Tensor& t) {
  if (!t.defined()) fail("host_data", "the tensor is undefined (default-constructed).");
  const runtime::BufferPtr& buffer = trace::materialize(t);
  metrics::transfer_to_host.add();
  return std::shared_ptr<const void>(buffer, buffer->data());
}

}  // namespace lazytrace
