#include <sstream>

#include "ir/graph.h"

namespace lazytrace::ir {
namespace {

std::string type_str(const GNode& n) {
  return std::string(dtype_short(n.dtype)) + n.shape.str();
}

std::string attr_str(const GNode& n) {
  std::ostringstream os;
  if (n.op == OpKind::Scalar) {
    if (n.scalar_is_param)
      os << "param#" << n.param << "=" << n.value;
    else
      os << n.value;
  } else if (n.op == OpKind::Data) {
    os << "param#" << n.param;
  } else if (n.op == OpKind::Iota) {
    os << "start=" << n.attrs.get_double(0) << ", step=" << n.attrs.get_double(1);
  } else if (n.attrs.n > 0) {
    os << "{";
    for (int i = 0; i < n.attrs.n; ++i) os << (i ? "," : "") << n.attrs[i];
    os << "}";
    if (is_reduce(n.op) && n.attrs.flag) os << " keepdim";
  }
  return os.str();
}

}  // namespace

std::string to_text(const Graph& g) {
  std::ostringstream os;
  os << "graph " << (g.name.empty() ? "main" : g.name) << " (" << g.nodes.size() << " nodes, "
     << g.param_nodes.size() << " params, " << g.scalar_nodes.size() << " scalar params)\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GNode& n = g.nodes[i];
    os << "  %" << i << " = " << op_name(n.op) << "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) os << (j ? ", " : "") << "%" << n.inputs[j];
    std::string a = attr_str(n);
    if (!a.empty()) os << (n.inputs.empty() ? "" : ", ") << a;
    os << ") : " << type_str(n) << "\n";
  }
  os << "  return (";
  for (size_t i = 0; i < g.results.size(); ++i) os << (i ? ", " : "") << "%" << g.results[i];
  os << ")\n";
  return os.str();
}

std::string to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph \"" << (g.name.empty() ? "main" : g.name) << "\" {\n  node [shape=box];\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GNode& n = g.nodes[i];
    std::string a = attr_str(n);
    os << "  n" << i << " [label=\"%" << i << " " << op_name(n.op) << (a.empty() ? "" : " ") << a
       << "\\n"
       << type_str(n) << "\"";
    if (n.op == OpKind::Data || n.op == OpKind::Scalar) os << ", style=filled, fillcolor=lightgrey";
    os << "];\n";
    for (int in : n.inputs) os << "  n" << in << " -> n" << i << ";\n";
  }
  for (size_t i = 0; i < g.results.size(); ++i)
    os << "  r" << i << " [label=\"result " << i << "\", shape=ellipse];\n  n" << g.results[i]
       << " -> r" << i << ";\n";
  os << "}\n";
  return os.str();
}

}  // namespace lazytrace::ir
