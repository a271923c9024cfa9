#pragma once
// Checks of values computed in the graph, for the layers above ops (nn): each returns its
// input unchanged and makes the sync that computes it fail with lt::Error on a bad value.
#include "ir/op.h"
#include "lazytrace/trace/tensor.h"

namespace lazytrace::ops {

using ir::IndexCheck;  // who checks: names the operation and the indices in the error

/** Integer indices: each in [0, limit) or equal to ignore_index. */
Tensor check_indices(const Tensor& indices, int64_t limit, int64_t ignore_index, IndexCheck who);

}  // namespace lazytrace::ops
