#pragma once
// Loop: a scan or a while loop over a traced body, run by the backend with the body
// compiled once (DESIGN decisions 4 and 6). A Loop node's operands are one per body input,
// in Param order; each input has a role:
// - Carry k: the initial value of carry k; each iteration reads the current carry and the
//   body's result k is the next one;
// - X: a stacked tensor [length, ...]; iteration reads slice idx (idx runs backwards when
//   `reverse`), without copying;
// - Invariant: the same tensor every iteration (closed-over tensors, the rng seed);
// - Counter: an int64 scalar base; the body reads base + idx * step (the rng offset, so
//   every iteration draws different numbers, and the same ones for the same slice);
// - Unused: the body never reads it (the operand is a placeholder scalar).
// A scan's body returns the new carries, then one slice of each stacked output (ys); the
// loop's results are the final carries, then the ys [length, ...]. A while loop also has a
// `cond` body over the same inputs returning a bool scalar, checked before each iteration.
#include <memory>
#include <utility>
#include <vector>

#include "ir/body.h"

namespace lazytrace::ir {

struct Loop {
  enum class Kind : uint8_t { Scan, While };
  enum class Role : uint8_t { Carry, X, Invariant, Counter, Unused };
  Kind kind = Kind::Scan;
  std::shared_ptr<const Body> body;
  std::shared_ptr<const Body> cond;  // While only
  std::vector<Role> roles;           // one per body input
  std::vector<int64_t> steps;        // Counter inputs: the step per iteration (else 0)
  int num_carry = 0;
  int64_t length = 0;  // Scan: iterations
  bool reverse = false;
  std::vector<std::pair<Shape, DType>> result_types;  // final carries, then ys
  // The leaves of body then cond, in walk order (the walk appends them at the loop node).
  std::vector<Node*> data, scalars;
  uint64_t hash = 0;
};

/**
 * The loop node and its results. `operands` has one node per body input (roles in
 * `loop`); result types are derived here.
 */
std::vector<NodePtr> make_loop(Loop loop, std::vector<NodePtr> operands);

inline const Loop& loop_of(const Node& n) {
  return *std::get<std::shared_ptr<const Loop>>(n.payload);
}

}  // namespace lazytrace::ir
