#pragma once
// The graph passes: a graph in, a graph out, before a device compiles it. The optional ones
// run where the PassSet has them on (runtime/passes.def).
#include "ir/graph.h"
#include "runtime/passes.h"

namespace lazytrace::compiler {

/** Removes dead nodes, simplifies (Pass::Simplify), merges identical ones (same op, attrs
 * and operands; Pass::Cse) and rewrites updates of small gradient products
 * (Pass::GradProduct). */
ir::Graph optimize(const ir::Graph& g, runtime::PassSet passes = {});
/** The grad_product rewrite (grad_product.cpp): AdamW of a weight's small float32 gradient
 * product becomes AdamWProduct of the product's operands. */
void fuse_grad_products(ir::Graph& g);

}  // namespace lazytrace::compiler
