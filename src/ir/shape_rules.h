#pragma once
// Shape rules of every op, in one place: ops/ calls them when it records a node, and
// the verifier calls them again on a built graph. Each throws lt::Error naming the op,
// the shapes involved, and what to do.
#include <vector>

#include "ir/op.h"
#include "lazytrace/core/shape.h"

namespace lazytrace::ir {

/** NumPy broadcasting of two shapes. */
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
/** Checks that `from` broadcasts to `to`. */
void check_broadcast_to(const char* op, const Shape& from, const Shape& to);
/** A dim in [-ndim, ndim) made non-negative. */
int normalize_dim(const char* op, int64_t dim, int ndim, const Shape& shape);
/** Reduced shape; `dims` becomes sorted, non-negative, unique. Empty dims: all of them. */
Shape reduce_shape(const char* op, const Shape& in, std::vector<int>& dims, bool keepdim);
/** matmul with NumPy's rules for 1-D operands and broadcast batch dims. */
Shape matmul_shape(const Shape& a, const Shape& b);
/** Reshape target with at most one -1 inferred. */
Shape reshape_shape(const Shape& in, const std::vector<int64_t>& target);
Shape permute_shape(const Shape& in, std::vector<int>& perm);
/** Slice [start, stop) with step along dim, Python-style clamping of start/stop. */
Shape slice_shape(const Shape& in, int& dim, int64_t& start, int64_t& stop, int64_t step);
Shape concat_shape(const std::vector<Shape>& ins, int& dim);
Shape index_select_shape(const Shape& in, int& dim, const Shape& index);
/** index_add: source must be `in` with dim `dim` resized to the index length. */
void check_index_add(const Shape& in, int& dim, const Shape& index, const Shape& source);
/** A collective's result over `ranks` ranks: reduce_scatter keeps dim 0's block of this rank
 * (dim 0 must divide evenly), all_gather stacks the ranks' operands along dim 0. */
Shape collective_shape(OpKind op, const Shape& in, int64_t ranks);

}  // namespace lazytrace::ir
