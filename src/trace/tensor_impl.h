#pragma once
// TensorImpl and the recording interface that ops/ uses: make a pending tensor from a
// node, get the node of any tensor, time the recording.
#include <memory>

#include "ir/node.h"
#include "lazytrace/trace/tensor.h"
#include "metrics/known.h"
#include "runtime/buffer.h"

namespace lazytrace {

struct TensorImpl {
  Shape shape;
  DType dtype;
  // Pending: the op that computes this tensor. Materialized: null, or the cached Data
  // node that stands for `buffer` in later graphs.
  ir::NodePtr node;
  runtime::BufferPtr buffer;
  // Link in the list of live pending tensors that sync() computes.
  TensorImpl* prev = nullptr;
  TensorImpl* next = nullptr;
  bool linked = false;

  TensorImpl(Shape s, DType d) : shape(std::move(s)), dtype(d) {}
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  bool pending() const { return node && node->op != ir::OpKind::Data; }
  void link();
  void unlink();
};

namespace trace {

/** A new pending tensor computed by `node`. */
Tensor make_pending(ir::NodePtr node);
/** Sets an existing tensor to be computed by `node` (copy_). */
void set_pending(TensorImpl& impl, ir::NodePtr node);
/** A materialized tensor over `buffer`. */
Tensor make_materialized(runtime::BufferPtr buffer, DType dtype, Shape shape);
/** The node standing for a tensor's value: its op if pending, else a Data node. */
const ir::NodePtr& node_of(const Tensor& t);
/** The tensor's buffer, computing it first if it is pending. */
const runtime::BufferPtr& materialize(const Tensor& t);

/** The random generator's state; each random op takes numel counters. */
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};
RngState& rng();

/**
 * Marks the recording of one public op: counts it and adds its time to TraceTime.
 * Nested ops (an op built from others) count and time only at the outermost level.
 */
class OpScope {
 public:
  OpScope() : outer_(depth_++ == 0), start_(outer_ ? metrics::ticks() : 0) {}
  ~OpScope() {
    --depth_;
    if (outer_) {
      metrics::trace_time.add_ticks(metrics::ticks() - start_);
    }
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  static thread_local int depth_;
  bool outer_;
  int64_t start_;
};

}  // namespace trace
}  // namespace lazytrace
