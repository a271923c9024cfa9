#pragma once
/**
 * Sharing memory with other libraries without copying (NumPy, DLPack producers and
 * consumers, memory-mapped files).
 *
 *   auto t = lt::from_blob(ptr, {2, 3}, lt::float32, owner);   // reads ptr, copies nothing
 *   auto u = lt::copy_from(ptr, {2, 3}, lt::float32);          // a tensor of its own
 *   auto v = lt::from_writer({2, 3}, lt::float32, read_into);  // its own, written in place
 *   std::shared_ptr<const void> p = lt::host_data(y);          // y's elements, kept alive
 */
#include <cstddef>
#include <functional>
#include <memory>

#include "lazytrace/trace/tensor.h"

namespace lazytrace {

/**
 * A materialized tensor over `data`: numel(shape) contiguous row-major elements of `dtype`,
 * aligned to its item size. Nothing is copied and the library never writes into the memory;
 * `owner` (may be null) is held while any tensor or graph reads it, and whoever owns the
 * memory must not change it meanwhile.
 */
Tensor from_blob(const void* data, const Shape& shape, DType dtype,
                 std::shared_ptr<const void> owner);

/** A materialized tensor holding a copy of numel(shape) contiguous row-major elements of
 * `dtype` at `data` (any alignment). */
Tensor copy_from(const void* data, const Shape& shape, DType dtype);

/**
 * A materialized tensor whose elements `write` puts in place (read from a file, say), with
 * nothing copied. `write` is called once, before this returns, with the tensor's new memory
 * and its size, numel(shape) * itemsize(dtype) bytes (also when 0): uninitialized, 64-byte
 * aligned, to be filled with contiguous row-major elements of `dtype` and not kept (it is the
 * library's, as a result's memory is). An exception from `write` frees it and propagates.
 */
Tensor from_writer(const Shape& shape, DType dtype,
                   const std::function<void(void* data, size_t nbytes)>& write);

/**
 * The elements of t (materializing it): contiguous, row-major, in t's dtype, valid and
 * unchanged while the returned pointer is held (a later copy_ into t gives t new memory).
 */
std::shared_ptr<const void> host_data(const Tensor& t);

}  // namespace lazytrace
