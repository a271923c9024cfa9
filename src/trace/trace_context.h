#pragma once
// Tracing a function into a Body (ir/body.h), for the tools. While a TraceScope is active
// on a thread, ops record as usual, but:
// - a tensor made outside the scope that the function uses is lifted: it becomes an input
//   of the body (a Param), and the tool passes its current value at each call;
// - random ops draw from inputs too (the generator's seed and offset), so each call of the
//   body draws fresh numbers;
// - reading a value (item, to_vector, sync) throws TraceReadError: a traced function is
//   recorded once and replayed, so there is nothing to read;
// - tensors made inside never join the pending list: sync() never sees a body's nodes.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/body.h"
#include "lazytrace/trace/trace_error.h"
#include "trace/tensor_impl.h"

namespace lazytrace::trace {

/** What each input of a traced body is, in Param order. */
struct BodyInput {
  enum Kind { Explicit, Lifted, RngSeed, RngOffset, Extra } kind;
  int index = 0;  // Explicit, Lifted, Extra: position in that kind's list
};

using lazytrace::TraceReadError;

struct TraceContext;

class TraceScope {
 public:
  /** Starts tracing on this thread; `tool` names it in messages ("assume_pure"). */
  explicit TraceScope(std::string tool);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  /** The next explicit input: a placeholder of this type. */
  Tensor input(const Shape& shape, DType dtype, bool requires_grad = false);
  /** An input made after the function ran (a cotangent for a VJP body). */
  Tensor extra(const Shape& shape, DType dtype);
  /** Which lifted floating tensors' stand-ins require grad: none (the default), all (VJP
   * traces), or those whose outer tensor does (compile, where backward runs inside). */
  enum class LiftGrad { none, all, same };
  void set_lift_grad(LiftGrad mode);
  /**
   * Lets the function write into outer tensors (compile): a copy_ into one gives its
   * stand-in the new value, and the body returns it as an extra output for the tool to
   * write back after the call (written()).
   */
  void allow_writes();
  /** The outer tensors written, in order; finish() appends their new values to the outputs. */
  const std::vector<Tensor>& written() const;

  /**
   * Ends tracing: the body computing `outputs` from this scope's inputs. Its calls pass the
   * lifted tensors in a Pack, after the explicit inputs i with packed_explicit[i] >= 0 (at
   * that position; empty: none).
   */
  std::shared_ptr<const ir::Body> finish(const std::vector<Tensor>& outputs,
                                         const std::string& name,
                                         const std::vector<int>& packed_explicit = {});

  const std::vector<BodyInput>& inputs() const;
  /**
   * Lifts outer tensors now, in this order: a function traced again (for its backward) then
   * lifts the tensors of its first trace in that trace's order, whatever order it reaches
   * them in this time.
   */
  void lift_first(const std::vector<Tensor>& outer);
  /** The outer tensors the function used, in the order they were lifted. */
  const std::vector<Tensor>& lifted() const;
  /** Their stand-ins inside the trace (same order). */
  const std::vector<Tensor>& lifted_placeholders() const;
  /** How many random numbers the function draws per call. */
  uint64_t rng_count() const;

 private:
  TraceContext* ctx_;
  TraceContext* parent_;
};

// The active scope's id and the tensor whose stand-in is being made, for the inline checks
// below (on every recorded op).
extern thread_local uint32_t g_context_id;
extern thread_local const TensorImpl* g_lifting;
// How many syncs this thread has started: what ops record between two is the same graph
// each time the program repeats them (ops/promotion.cpp's shared constants start afresh).
extern thread_local uint32_t g_syncs_started;

/** The active scope's id (tensors record where they were made), 0 outside any. */
inline uint32_t current_context_id() {
  return g_context_id;
}
/** The stand-in for outer tensor t in the active trace (made on first use). */
const Tensor& lifted_placeholder(const Tensor& t);
/** Its node. */
inline const ir::NodePtr& lift(const Tensor& t) {
  return lifted_placeholder(t).impl()->node;
}
/** Whether the active trace lets the function write into outer tensors (compile). */
bool writes_allowed();
/** In a trace that allows writes (writes_allowed()), gives outer tensor t the value `node`
 * (copy_). */
void write_outer(const Tensor& t, ir::NodePtr node);
/** Throws the error for a tensor made inside a traced function and used after it ended. */
[[noreturn]] void escaped_from_trace(const char* op);
/** Whether two Data nodes hold the same bytes (a purity check's retrace against the first). */
bool same_data(const ir::Node& a, const ir::Node& b);
/** Throws TraceReadError if a trace is active: `what` names the read ("item()"). */
void check_not_tracing(const char* what);

/** sync(tensors), or sync() when null, naming the graph (dumps, per-name metrics). */
void sync_named(const std::vector<Tensor>* tensors, const std::string& name);

/** The active scope's tool name ("" outside any). */
const std::string& tracing_tool();
/** The stand-ins of the outer tensors lifted so far by an active trace that does not allow
 * writes (assume_pure, a loop body); null outside a trace or in one that does (compile). */
const std::vector<Tensor>* read_only_stand_ins();
/** Whether t comes from outside the active trace (it is lifted when an op uses it). */
inline bool is_outer(const Tensor& t) {
  const TensorImpl* impl = t.impl().get();
  return g_context_id != 0 && impl->context != g_context_id && impl != g_lifting;
}
/**
 * The seed and offset operands for a draw of n random numbers: the global generator's
 * state (advanced by n) outside a trace; the body's generator inputs inside one.
 */
std::pair<ir::NodePtr, ir::NodePtr> random_operands(uint64_t n);

}  // namespace lazytrace::trace
