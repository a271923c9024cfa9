#pragma once
// Shared by the tools that trace a function into a body (function_cache.cpp, scan.cpp,
// loops.cpp): the operands of a call or loop of the body, and its VJP traced jointly with it.
#include <string>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "lazytrace/ops/autocast.h"
#include "lazytrace/ops/ops.h"
#include "trace/trace_context.h"

namespace lazytrace::tools {

/**
 * A trace cache's key, joined with what of this thread's state a trace builds in: its batch
 * rows (lt::BatchRows) where it has some (a traced body holds the offset of dropout's draws
 * for those rows, so a thread with other rows, a thread rank, traces its own), and autocast
 * (its casts are in the trace).
 */
inline uint64_t keyed_by_thread_state(uint64_t key) {
  if (is_autocast_enabled())
    key = hash_combine(key, 0xa17ca57u + static_cast<uint64_t>(autocast_dtype())) | 1;
  const BatchRows r = batch_rows();
  if (r.count == 0) return key;
  for (int64_t v : {r.first, r.count, r.total}) key = hash_combine(key, static_cast<uint64_t>(v));
  return key | 1;
}

/**
 * The operands of a call or loop of a traced body, in its Param order (`inputs`, as its trace
 * gave them): explicit_node(i), lifted_node(i) and extra_node(i) give the node of explicit,
 * lifted and extra input i (a null lifted node is no operand: a call passes the lifted tensors
 * in its Pack), `rng` the generator's seed and offset.
 */
template <typename Explicit, typename Lifted, typename Extra>
std::vector<ir::NodePtr> body_operands(const std::vector<trace::BodyInput>& inputs,
                                       const Explicit& explicit_node, const Lifted& lifted_node,
                                       const Extra& extra_node,
                                       const std::pair<ir::NodePtr, ir::NodePtr>& rng) {
  std::vector<ir::NodePtr> ops;
  ops.reserve(inputs.size());
  for (const trace::BodyInput& in : inputs) {
    const auto i = static_cast<size_t>(in.index);
    switch (in.kind) {
      case trace::BodyInput::Explicit:
        ops.push_back(explicit_node(i));
        break;
      case trace::BodyInput::Lifted:
        if (ir::NodePtr n = lifted_node(i)) ops.push_back(std::move(n));
        break;
      case trace::BodyInput::RngSeed:
        ops.push_back(rng.first);
        break;
      case trace::BodyInput::RngOffset:
        ops.push_back(rng.second);
        break;
      case trace::BodyInput::Extra:
        ops.push_back(extra_node(i));
        break;
    }
  }
  return ops;
}

/** A VJP traced jointly with its forward (joint_vjp). */
struct JointVjp {
  std::vector<Tensor> grads;  // one per floating input: explicit, then lifted
  std::vector<int> grad_of;   // the input of each: explicit i, or lifted k as inputs.size() + k
};

/**
 * The VJP of a function that ran in `scope` (lifting with LiftGrad::all) on `inputs`,
 * placeholders that require grad, and gave `outputs`: a cotangent input (scope.extra) per
 * floating output, then the gradients of those that require grad, given their cotangents,
 * with respect to every floating input and lifted tensor (zeros where nothing requires
 * grad). Fails, as `tool` and naming the function `what`, where the function lifted other
 * tensors than `lifted`, those of its forward trace.
 */
JointVjp joint_vjp(trace::TraceScope& scope, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs, const std::vector<Tensor>& lifted,
                   const char* tool, const std::string& what);

}  // namespace lazytrace::tools
