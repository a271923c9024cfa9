#pragma once
// TensorImpl and the recording interface that ops/ uses: make a pending tensor from a
// node, get the node of any tensor, time the recording.
#include <atomic>
#include <memory>
#include <vector>

#include "ir/node.h"
#include "lazytrace/trace/tensor.h"
#include "metrics/known.h"
#include "runtime/buffer.h"

namespace lazytrace {

struct PendingList;
namespace autograd {
struct Function;  // the autograd layer's tape, opaque here
struct Meta;
}  // namespace autograd

// At the start of a cache line: what a call's flattening and the tape read is its first
// line, what ops read its first two.
struct alignas(64) TensorImpl {
  // The first line: a leaf's type key, grad state and node.
  //
  // The key of (dtype, shape) that a call's flattening hashes (pytree.cpp), there made once
  // (0: not yet), so that it reads this line alone. Shape and dtype never change.
  mutable std::atomic<uint64_t> type_key{0};
  const DType dtype;
  // A leaf's requires_grad (its gradient accumulates in autograd->grad): beside grad_fn, so
  // that the tape's checks read no other memory.
  bool requires_grad = false;
  uint32_t context = 0;  // the trace (trace_context.h) it was made in; 0: none
  // Pending: the op that computes this tensor. Materialized: the Data node that stands for
  // `buffer` in later graphs (or the op a sync computed, become Data).
  ir::NodePtr node;
  // Gradient history: the op that made this tensor from tensors that require grad (null
  // for a leaf); a leaf's grad.
  std::shared_ptr<autograd::Function> grad_fn;
  std::shared_ptr<autograd::Meta> autograd;
  // The second line.
  const Shape shape;
  int output_nr = 0;  // which output of grad_fn this tensor is
  runtime::BufferPtr buffer;
  // Link in the list of live pending tensors that sync() computes: the list of the thread
  // that recorded the tensor (`owner`); only that thread edits it.
  TensorImpl* prev = nullptr;
  TensorImpl* next = nullptr;
  PendingList* owner = nullptr;
  TensorImpl* next_released = nullptr;  // while waiting to be destroyed by the owner thread

  TensorImpl(Shape s, DType d) : dtype(d), shape(std::move(s)) {}
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  bool pending() const { return node && node->op != ir::OpKind::Data; }
  /** The buffer of a materialized tensor (also one whose shared op another sync computed). */
  const runtime::BufferPtr& materialized() {
    if (!buffer && node && node->op == ir::OpKind::Data) buffer = node->buffer();
    return buffer;
  }
  void link();
  void unlink();
};

namespace trace {

/**
 * This thread's live pending tensors, for sync(); call with the graph lock held. The
 * pointers stay valid through the sync: only this thread destroys its list's tensors
 * (a handle dropped elsewhere hands its tensor back instead of destroying it).
 */
std::vector<TensorImpl*> pending_tensors();
/** The threads' lists of pending tensors held: one per thread that has recorded, while it
 * runs or while pending tensors it recorded live. */
size_t pending_lists();
/** A new pending tensor computed by `node`. */
Tensor make_pending(ir::NodePtr node);
/** Gives an existing tensor a new value computed by `node`, or held by it if it is a Data
 * node (copy_). */
void set_value(TensorImpl& impl, ir::NodePtr node);
/** Counts set_value calls: while it is unchanged, every tensor's node is what it was. */
uint64_t write_epoch();
/** A tensor for `node`: materialized if it is a Data node (computed by a sync), else pending. */
Tensor tensor_of(ir::NodePtr node);
/** A materialized tensor over `buffer`. */
Tensor make_materialized(runtime::BufferPtr buffer, DType dtype, Shape shape);
/** The node standing for a tensor's value: its op if pending, else a Data node. */
const ir::NodePtr& node_of(const Tensor& t);
/** The tensor's buffer, computing it first if it is pending. */
const runtime::BufferPtr& materialize(const Tensor& t);

/** The global generator's (seed, first counter) for a draw of n numbers; advances it by n. */
struct RngDraw {
  uint64_t seed;
  uint64_t offset;
};
RngDraw draw_random(uint64_t n);
/** Restarts the generator at counter 0 of a new seed. */
void seed_random(uint64_t seed);

/**
 * Marks the recording of one public op and adds its time to TraceTime; an op built from
 * others (softmax) is timed once, at the outermost level. TraceCount counts nodes recorded.
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
