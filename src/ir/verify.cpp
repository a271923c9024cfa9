#include <vector>

#include "ir/graph.h"
#include "ir/shape_rules.h"
#include "lazytrace/core/error.h"

namespace lazytrace::ir {

void verify(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GNode& n = g.nodes[i];
    const OpInfo& info = op_info(n.op);
    if (info.arity >= 0 && static_cast<int>(n.inputs.size()) != info.arity)
      fail("verify", "node %", i, " (", info.name, ") has ", n.inputs.size(),
           " operands, expected ", info.arity);
    for (int in : n.inputs)
      if (in < 0 || static_cast<size_t>(in) >= i)
        fail("verify", "node %", i, " (", info.name, ") uses %", in, " before it is defined");
    auto in_shape = [&](int k) { return g.nodes[n.inputs[k]].shape; };
    Shape expect = n.shape;
    if (info.family == OpFamily::Elementwise) {
      Shape s = in_shape(0);
      for (size_t k = 1; k < n.inputs.size(); ++k) s = broadcast_shapes(info.name, s, in_shape(k));
      expect = s;
    } else if (n.op == OpKind::Matmul) {
      expect = matmul_shape(in_shape(0), in_shape(1));
    } else if (n.op == OpKind::Reshape) {
      if (in_shape(0).numel() != n.shape.numel()) expect = in_shape(0);
    } else if (n.op == OpKind::BroadcastTo) {
      check_broadcast_to(info.name, in_shape(0), n.shape);
    } else if (n.op == OpKind::AdamW) {
      for (int k = 1; k < 7; ++k)
        if (in_shape(k) != (k < 4 ? n.shape : Shape{}))
          fail("verify", "node %", i, " (adamw) operand ", k, " has shape ", in_shape(k).str());
    } else if (n.op == OpKind::AdamWProduct) {
      if (n.inputs.size() != 8 && n.inputs.size() != 9)
        fail("verify", "node %", i, " (adamw_product) has ", n.inputs.size(),
             " operands, expected 8 or 9");
      for (int k = 3; k < static_cast<int>(n.inputs.size()); ++k)
        if (in_shape(k) != (k < 5 ? n.shape : Shape{}))
          fail("verify", "node %", i, " (adamw_product) operand ", k, " has shape ",
               in_shape(k).str());
      const Shape product = matmul_shape(in_shape(1), in_shape(2));
      const Shape grad = n.attrs.flag ? Shape{n.shape[1], n.shape[0]} : n.shape;
      if (product != grad)
        fail("verify", "node %", i, " (adamw_product) computes a gradient of shape ", product.str(),
             " for a parameter of shape ", n.shape.str());
    } else if (is_collective(n.op)) {
      expect = collective_shape(n.op, in_shape(0), n.attrs[2]);
    } else if (is_reduce(n.op)) {
      std::vector<int> dims(n.attrs.begin(), n.attrs.end());
      expect = reduce_shape(info.name, in_shape(0), dims, n.attrs.flag);
    }
    if (expect != n.shape)
      fail("verify", "node %", i, " (", info.name, ") has shape ", n.shape.str(), ", expected ",
           expect.str());
  }
  for (int r : g.results)
    if (r < 0 || static_cast<size_t>(r) >= g.nodes.size())
      fail("verify", "result refers to missing node %", r);
}

}  // namespace lazytrace::ir
