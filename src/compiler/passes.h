#pragma once
// The graph passes: a graph in, a graph out, before a device compiles it. The optional ones
// run where the PassSet has them on (runtime/passes.def).
#include "ir/graph.h"
#include "runtime/passes.h"

namespace lazytrace::compiler {

/** A product over at most this many rows (tokens) is a weight's gradient over few tokens,
 * which its update makes itself (grad_product) and whose norm comes from its factors
 * (gram_norms). */
inline constexpr int64_t kFewRows = 32;

/** The pipeline: simplify (Pass::Simplify), cse (Pass::Cse), accumulate_slice_grads
 * (Pass::SliceGrads), gram_norms (Pass::GramNorms, then eliminate_dead), fuse_grad_products
 * (Pass::GradProduct), then eliminate_dead. */
ir::Graph optimize(const ir::Graph& g, runtime::PassSet passes = {});
/** x + 0, x - 0, x * 1, x / 1, 0 + x, 1 * x become x (simplify.cpp). */
ir::Graph simplify(const ir::Graph& g);
/** Identical nodes (op, dtype, shape, attributes, operands) merge (cse.cpp). */
ir::Graph cse(const ir::Graph& g);
/** sum((a b)²) over few rows becomes sum((aᵀa) ∘ (b bᵀ)) in float64 (gram_norms.cpp). */
ir::Graph gram_norms(const ir::Graph& g);
/** The grad_product rewrite (grad_product.cpp): AdamW of a weight's small float32 gradient
 * product becomes AdamWProduct of the product's operands. */
void fuse_grad_products(ir::Graph& g);
/** A sum of gradients of slices of one tensor becomes one concat (slice_grads.cpp). */
ir::Graph accumulate_slice_grads(const ir::Graph& g);
/** Drops the nodes no result reads; parameters stay. */
ir::Graph eliminate_dead(const ir::Graph& g);

}  // namespace lazytrace::compiler
