#pragma once
// Node: one recorded op. Its shape, dtype and structural hash are fixed when it is made.
// Nodes are shared (std::shared_ptr) by the tensors and nodes that use them; releasing a
// long chain is iterative, so 100,000 chained ops free without deep recursion.
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <variant>
#include <vector>

#include "ir/op.h"
#include "lazytrace/core/dtype.h"
#include "lazytrace/core/shape.h"

namespace lazytrace::runtime {
class Buffer;
}

namespace lazytrace::ir {

struct Node;
struct Body;
struct Loop;

/** What a node holds beside its operands: a Data node its buffer (the runtime's, opaque
 * here), a Call its traced body, a Loop its loop. A std::variant, so reading the wrong one
 * is an error, not a cast. */
using Payload = std::variant<std::monostate, std::shared_ptr<runtime::Buffer>,
                             std::shared_ptr<const Body>, std::shared_ptr<const Loop>>;

using NodePtr = std::shared_ptr<Node>;

/**
 * Small integer attributes (a double is stored by its bits): inline up to eight, on the heap
 * past that (the permutation or reduced dims of a tensor of more than eight dims).
 */
struct Attrs {
  static constexpr int kInline = 8;
  static constexpr int kMax = 255;
  Attrs() = default;
  Attrs(const Attrs& o) { *this = o; }
  Attrs(Attrs&&) noexcept = default;
  Attrs& operator=(const Attrs& o);
  Attrs& operator=(Attrs&&) noexcept = default;

  uint8_t n = 0;
  bool flag = false;  // keepdim for reductions
  void push(int64_t v);
  void push_double(double v) {
    int64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    push(bits);
  }
  double get_double(int i) const {
    double v;
    std::memcpy(&v, begin() + i, sizeof v);
    return v;
  }
  const int64_t* begin() const { return heap_ ? heap_.get() : inline_.data(); }
  const int64_t* end() const { return begin() + n; }
  int64_t operator[](int i) const { return begin()[i]; }
  uint64_t hash() const;

 private:
  std::array<int64_t, kInline> inline_{};
  std::unique_ptr<int64_t[]> heap_;  // all n of them, once there are more than kInline
};

struct Node {
  OpKind op;
  DType dtype;
  Shape shape;
  Attrs attrs;
  // Scalar nodes: the value (both forms, so int64 values survive exactly).
  double value = 0;
  int64_t ivalue = 0;
  bool scalar_is_param = false;  // a Scalar whose value is a graph parameter
  bool scalar_literal = false;   // a constant of the traced code (make_scalar), not a param
  // A root of a sync that runs now (trace/sync.cpp): another sync whose graph reaches it
  // waits until it is computed.
  bool in_flight = false;
  // A Data node whose buffer a run that failed (an error, an interrupt) was given to write
  // its results into (trace/sync.cpp's donated): what it held may be gone, so no later
  // sync may read it.
  bool lost = false;
  // A Data node's buffer (opaque to the IR), a Call's body, a Loop's loop; else empty.
  Payload payload;
  uint64_t local_hash = 0;  // op, dtype, shape, attrs (and a hashed scalar's value)
  uint64_t hash = 0;        // local_hash combined with the operands' hashes
  // Scratch for graph walks (sync, printers): a walk stamps nodes with its epoch.
  uint32_t mark = 0;
  int32_t index = -1;

  int num_operands() const { return n_inline_ + (more_ ? static_cast<int>(more_->size()) : 0); }
  const NodePtr& operand(int i) const {
    return i < kInline ? inline_[i] : (*more_)[static_cast<size_t>(i - kInline)];
  }

  /** Moves the operands in. */
  Node(OpKind op, DType dtype, Shape shape, NodePtr* operands, int n, Attrs attrs);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /**
   * Turns a computed op into a leaf for its result buffer, in place, releasing its
   * operands: every pending op that uses it now reads the buffer instead of recomputing
   * it (the pending graph is cut at what sync() computed).
   */
  void become_data(std::shared_ptr<runtime::Buffer> buffer);

  /** A node of many results (a call, a loop, an update) is told its CallResult nodes, so
   * that a sync that computes it keeps those still held (trace/sync.cpp). */
  void set_results(const std::vector<NodePtr>& results);
  /** Its CallResult nodes still held somewhere. */
  std::vector<NodePtr> live_results() const;
  /** A Data node's buffer. */
  const std::shared_ptr<runtime::Buffer>& buffer() const {
    return std::get<std::shared_ptr<runtime::Buffer>>(payload);
  }

 private:
  static constexpr int kInline = 3;
  std::array<NodePtr, kInline> inline_;
  int n_inline_ = 0;
  std::unique_ptr<std::vector<NodePtr>> more_;                 // operands past the third (concat)
  std::unique_ptr<std::vector<std::weak_ptr<Node>>> results_;  // set_results
};

/** Whether an op is a matrix's transpose: Permute [1, 0]. */
inline bool is_matrix_transpose(OpKind op, const Attrs& perm) {
  return op == OpKind::Permute && perm.n == 2 && perm[0] == 1 && perm[1] == 0;
}

/** lt::Error naming `op` where a tensor of this type would have more bytes than 64 bits
 * count (make_node checks every node; creation ops check first, in their own name). */
void check_size(const char* op, DType dtype, const Shape& shape);
/** A new op node; its hashes are computed here. Operands passed by value are moved in. */
NodePtr make_node(OpKind op, DType dtype, Shape shape, Attrs attrs = {});
NodePtr make_node(OpKind op, DType dtype, Shape shape, NodePtr a, Attrs attrs = {});
NodePtr make_node(OpKind op, DType dtype, Shape shape, NodePtr a, NodePtr b, Attrs attrs = {});
NodePtr make_node(OpKind op, DType dtype, Shape shape, NodePtr a, NodePtr b, NodePtr c,
                  Attrs attrs = {});
NodePtr make_node(OpKind op, DType dtype, Shape shape, std::vector<NodePtr> operands,
                  Attrs attrs = {});
/** A 0-d constant. 0, 1 and -1 are part of the graph; other values become parameters. */
NodePtr make_scalar(double value, int64_t ivalue, DType dtype);
/** A 0-d scalar that is always a graph parameter, whatever its value (seeds, counters). */
NodePtr make_scalar_param(double value, int64_t ivalue, DType dtype);
/** A leaf standing for a materialized buffer. */
NodePtr make_data(std::shared_ptr<runtime::Buffer> buffer, DType dtype, Shape shape);

/** A fresh epoch for marking nodes during a walk. */
uint32_t next_walk_epoch();

}  // namespace lazytrace::ir
