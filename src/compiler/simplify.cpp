// The simplify pass: x + 0, x - 0, x * 1, x / 1 (where the result has x's shape and dtype)
// become x, and 0 + x, 1 * x too. Requires nothing; provides fewer nodes, for CSE and DCE.
#include "compiler/passes.h"
#include "compiler/rebuild.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

bool is_const(const GNode& s, double v) {
  return s.op == OpKind::Scalar && !s.scalar_is_param && s.value == v;
}

// The operand that stands for n, or -1.
int identity_operand(const ir::Graph& g, const GNode& n) {
  const bool add = n.op == OpKind::Add || n.op == OpKind::Sub;
  const bool mul = n.op == OpKind::Mul || n.op == OpKind::Div;
  if ((!add && !mul) || n.inputs.size() != 2) return -1;
  const double e = add ? 0 : 1;
  const bool commutes = n.op == OpKind::Add || n.op == OpKind::Mul;
  auto stands_for_n = [&](int x) {
    const GNode& s = g.nodes[static_cast<size_t>(x)];
    return s.shape == n.shape && s.dtype == n.dtype;
  };
  const int a = n.inputs[0], b = n.inputs[1];
  if (is_const(g.nodes[static_cast<size_t>(b)], e) && stands_for_n(a)) return a;
  if (commutes && is_const(g.nodes[static_cast<size_t>(a)], e) && stands_for_n(b)) return b;
  return -1;
}

}  // namespace

ir::Graph simplify(const ir::Graph& g) {
  return rebuild(g, identity_operand);
}

}  // namespace lazytrace::compiler
