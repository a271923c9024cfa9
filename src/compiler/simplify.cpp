// The simplify pass: x + 0, x - 0, x * 1, x / 1 (where the result has x's shape and dtype)
// become x, and 0 + x, 1 * x too; for floating x, only where that is exact for x = -0 too
// (x + -0 and x - +0: -0 + +0 is +0). Requires nothing; provides fewer nodes, for CSE and DCE.
#include <cmath>

#include "compiler/passes.h"
#include "compiler/rebuild.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

bool is_const(const GNode& s, double v) {
  return s.op == OpKind::Scalar && !s.scalar_is_param && s.value == v;
}

// Whether c, the 0 of x + c or x - c, leaves every x of n's dtype as it is
bool keeps_sign_of_zero(const GNode& n, const GNode& c) {
  return !is_floating(n.dtype) || std::signbit(c.value) == (n.op == OpKind::Add);
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
  auto is_e = [&](int x) {
    const GNode& c = g.nodes[static_cast<size_t>(x)];
    return is_const(c, e) && (mul || keeps_sign_of_zero(n, c));
  };
  const int a = n.inputs[0], b = n.inputs[1];
  if (is_e(b) && stands_for_n(a)) return a;
  if (commutes && is_e(a) && stands_for_n(b)) return b;
  return -1;
}

}  // namespace

ir::Graph simplify(const ir::Graph& g) {
  return rebuild(g, identity_operand);
}

}  // namespace lazytrace::compiler
