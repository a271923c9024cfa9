#pragma once
// The op kinds a tensor's pending value is computed with, for the registry tests that check
// every kind in ir/ops.def has an ops_test row and, if differentiable, a gradient case.
#include <set>
#include <vector>

#include <lazytrace/lazytrace.h>

#include "ir/node.h"
#include "ir/op.h"
#include "trace/tensor_impl.h"

namespace lt_test {

using lazytrace::ir::OpKind;

/** Adds the kind of every node in the graph that computes t (t itself included). */
inline void collect_ops(const lazytrace::Tensor& t, std::set<OpKind>& kinds) {
  std::vector<const lazytrace::ir::Node*> todo{lazytrace::trace::node_of(t).get()};
  std::set<const lazytrace::ir::Node*> seen;
  while (!todo.empty()) {
    const lazytrace::ir::Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    kinds.insert(n->op);
    for (int i = 0; i < n->num_operands(); ++i) todo.push_back(n->operand(i).get());
  }
}

/** Every op kind, in the order of ir/ops.def. */
inline std::vector<OpKind> all_ops() {
  std::vector<OpKind> all;
  for (int k = 0; k < lazytrace::ir::kOpCount; ++k) all.push_back(static_cast<OpKind>(k));
  return all;
}

}  // namespace lt_test
