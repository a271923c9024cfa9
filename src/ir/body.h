#pragma once
// Body: a traced function as a graph of its own, whose leaves include Param nodes (its
// inputs), and the Call nodes that use it. A Call costs one node to record however large
// its body is; its hash is the body's, so a walk hashes it in O(1). When a graph is built,
// a call stays a Call node, which the compiler lowers to a step running the body's program,
// compiled once for all calls of the body; a call marked inline is copied in instead
// (build_graph), so the compiler fuses and merges across it (a differentiated call and its
// VJP, which recomputes the forward: merged, the forward runs once).
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace lazytrace::ir {

struct Body {
  std::string name;
  int num_inputs = 0;
  // Where input i comes from: packed[i] >= 0 is operand packed[i] of the call's Pack (its
  // last operand), -1 the call's next direct operand. Empty: all direct.
  std::vector<int> packed;
  std::vector<NodePtr> results;  // owns the body's nodes
  Graph graph;                   // results in order; Param nodes stand for the inputs
  // The body's own Data and parameter-Scalar leaves in walk order: a walk that meets a
  // call appends them to its parameters, exactly where build_graph inlines them.
  std::vector<Node*> data, scalars;
  uint64_t hash = 0;
};

/** A Param leaf: input `index` of the body being traced. */
NodePtr make_param(int index, DType dtype, Shape shape);
/** The body computing `results` from Params 0..num_inputs-1 (and constants). */
std::shared_ptr<const Body> make_body(std::vector<NodePtr> results, int num_inputs,
                                      std::string name, std::vector<int> packed = {});
/**
 * A call of `body` on its direct inputs and, if the body has packed inputs, a Pack node
 * holding them (made by make_pack, and reusable by later calls), and the call's results.
 */
std::vector<NodePtr> make_call(const std::shared_ptr<const Body>& body, std::vector<NodePtr> direct,
                               NodePtr pack = nullptr, bool inline_call = false);
/** A group of inputs for calls: recording a call that reuses it costs O(1). */
NodePtr make_pack(std::vector<NodePtr> inputs);

inline const Body& body_of(const Node& call) {
  return *std::get<std::shared_ptr<const Body>>(call.payload);
}

}  // namespace lazytrace::ir
