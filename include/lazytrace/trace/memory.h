#pragma once
/**
 * Sharing memory with other libraries without copying (NumPy, DLPack producers and
 * consumers, memory-mapped files).
 *
 *   auto t = lt::from_blob(ptr, {2, 3}, lt::float32, owner);   // reads ptr, copies nothing
 *   auto u = lt::copy_from(ptr, {2, 3}, lt::float32);          // a tensor of its own
 *   std::shared_ptr<const void> p = lt::host_data(y);          // y's elements, kept alive
 */
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
 * The elements of t (materializing it): contiguous, row-major, in t's dtype, valid and
 * unchanged while the returned pointer is held (a later copy_ into t gives t new memory).
 */
std::shared_ptr<const void> host_data(const Tensor& t);

}  // namespace lazytrace
