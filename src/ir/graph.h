#pragma once
// Graph: a computation with parameters and results, in topological order, with operands
// as indices. Built from pending nodes only when a graph is compiled (a cache miss) or
// printed; a cache hit needs only the Walk.
#include <memory>
#include <string>
#include <vector>

#include "ir/node.h"

namespace lazytrace::ir {

struct GNode {
  OpKind op;
  DType dtype;
  Shape shape;
  Attrs attrs;
  std::vector<int> inputs;
  int param = -1;  // Data: its parameter slot; parameter Scalar: its scalar slot
  double value = 0;
  int64_t ivalue = 0;
  bool scalar_is_param = false;
  // Call: the traced body it runs (its inputs are the body's inputs, then the body's own
  // Data and parameter-Scalar leaves, as nodes of this graph); Loop: the loop. Else empty.
  Payload payload;

  const Body& body() const { return *std::get<std::shared_ptr<const Body>>(payload); }
  const Loop& loop() const { return *std::get<std::shared_ptr<const Loop>>(payload); }
};

struct Graph {
  std::string name;
  uint64_t key = 0;
  std::vector<GNode> nodes;       // topological order
  std::vector<int> results;       // node index of each result
  std::vector<int> param_nodes;   // node index of each buffer parameter, in slot order
  std::vector<int> scalar_nodes;  // node index of each scalar parameter, in slot order
  // Per scalar slot: the first slot of a literal constant with the same dtype and value in
  // the walk the graph was built from (the walk's key says which are equal), else itself.
  // optimize() merges such constants, so two copies of one traced computation merge too.
  std::vector<int> scalar_same;
};

/** The pending nodes reachable from some roots, in topological order. */
struct Walk {
  std::vector<Node*> order;
  std::vector<Node*> params;     // Data nodes, in slot order
  std::vector<Node*> scalars;    // parameter Scalars, in slot order
  std::vector<int> scalar_same;  // Graph::scalar_same
  std::vector<int> results;      // position in `order` of each root
  uint64_t key = 0;              // exact structure: local hashes and operand positions
};

/** Iterative post-order walk; cost is linear in the nodes reached. */
Walk walk(const std::vector<Node*>& roots);
/** The same walk into `w`, whose vectors keep their memory from one walk to the next. */
void walk_into(const std::vector<Node*>& roots, Walk& w);
/** Adds `node`, whose operands the walk reached and which it did not, to the walk. */
void add_node(Walk& w, Node& node);
/** Makes `node`, which the walk reached, one more of its results (after the roots). */
void add_result(Walk& w, const Node& node);
/** The Graph of a walk. */
Graph build_graph(const Walk& w, std::string name);

/** Checks operand order, arity, and shapes; throws lt::Error("[verify] ...") on a defect. */
void verify(const Graph& g);

/** One line per node: "%3 = add(%1, %2) : f32[2, 3]". */
std::string to_text(const Graph& g);
/** Graphviz DOT. */
std::string to_dot(const Graph& g);

}  // namespace lazytrace::ir
