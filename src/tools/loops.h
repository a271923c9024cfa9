#pragma once
// Shared by the loop tools (scan.cpp, while_loop.cpp): recording a Loop node.
#include <vector>

#include "ir/loop.h"
#include "lazytrace/trace/tensor.h"
#include "trace/trace_context.h"

namespace lazytrace::tools {

/** Records `loop` on `operands` and returns its results as pending tensors. */
std::vector<Tensor> record_loop(ir::Loop loop, std::vector<ir::NodePtr> operands);

/**
 * The role of each input of a traced body, from what the trace says it is: explicit
 * inputs by position (the first `carries` are carries, the next `xs` are x slices, the
 * rest invariants), lifted tensors and the rng seed as invariants, the rng offset as a
 * counter stepping by `rng_count`, anything else (cotangent inputs) unused.
 */
void assign_roles(ir::Loop& loop, const std::vector<trace::BodyInput>& inputs, int carries, int xs,
                  uint64_t rng_count);

/**
 * A loop's operands in body input order: explicit inputs from `explicit_nodes` (by their
 * index), lifted tensors, the rng seed and offset, and a placeholder for unused inputs.
 */
std::vector<ir::NodePtr> loop_operands(const std::vector<trace::BodyInput>& inputs,
                                       const std::vector<ir::NodePtr>& explicit_nodes,
                                       const std::vector<Tensor>& lifted,
                                       const std::pair<ir::NodePtr, ir::NodePtr>& rng);
/** The same with the lifted tensors' nodes as read earlier (a loop's backward reads them as
 * its forward did). */
std::vector<ir::NodePtr> loop_operands(const std::vector<trace::BodyInput>& inputs,
                                       const std::vector<ir::NodePtr>& explicit_nodes,
                                       const std::vector<ir::NodePtr>& lifted_nodes,
                                       const std::pair<ir::NodePtr, ir::NodePtr>& rng);

}  // namespace lazytrace::tools
