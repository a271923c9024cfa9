#pragma once
// Checks of values computed in the graph, for the layers above ops (nn): each returns its
// input unchanged and makes the sync that computes it fail with lt::Error on a bad value.
#include "lazytrace/trace/tensor.h"

namespace lazytrace::ops {

/** cross_entropy's targets: each in [0, classes) or equal to ignore_index. */
Tensor check_targets(const Tensor& targets, int64_t classes, int64_t ignore_index);

}  // namespace lazytrace::ops
