#pragma once
// The op kinds a tensor's pending value is computed with, for the registry tests that check
// every kind in ir/ops.def has an ops_test row and, if differentiable, a gradient case.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
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

/**
 * Every op kind outside `skip` is in `recorded` or listed in `elsewhere` (with the tests
 * that cover it), never both: a new kind fails until it has its case, and a listed kind
 * fails once it has one. `missing` says what to add.
 */
inline void expect_covered(const std::set<OpKind>& recorded,
                           const std::map<OpKind, const char*>& elsewhere,
                           const std::set<OpKind>& skip, const std::string& missing) {
  for (OpKind k : all_ops()) {
    if (skip.count(k)) continue;
    const bool has = recorded.count(k) > 0, listed = elsewhere.count(k) > 0;
    EXPECT_TRUE(has || listed) << lazytrace::ir::op_name(k) << " has no " << missing;
    EXPECT_FALSE(has && listed) << lazytrace::ir::op_name(k)
                                << " has one now: take it off the list of kinds tested elsewhere";
  }
}

}  // namespace lt_test
