#pragma once
/**
 * The machinery shared by assume_pure and compile: a per-function cache of traced bodies
 * keyed by the argument signature, and the recording of one call. The templates in
 * assume_pure.h and compile.h adapt a C++ callable to it; nothing here is typed.
 */
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lazytrace/tools/pytree.h"

namespace lazytrace::ir {
struct Node;
}

namespace lazytrace::tools {

/** What tracing the function once produced: its output leaves and typed result. */
struct Traced {
  std::vector<Tensor> outputs;
  std::shared_ptr<void> result;  // the function's result (a typed template to rebuild from)
};
/** Runs the function on placeholder leaves (one per argument leaf, in order). */
using TraceFn = std::function<Traced(const std::vector<Tensor>& leaves)>;

struct CacheOptions {
  const char* tool = "assume_pure";  // in messages
  std::string name{};                // names the traced bodies in dumps and messages
  int max_different_graphs = 0;      // > 0: more distinct signatures is an lt::Error
  bool count_as_compile = false;     // counts into CompiledFn* metrics
  // compile: the function may run backward and write into outer tensors (an optimizer
  // step); writes are returned by the body and copied back after each call
  bool functional_writes = false;
  // assume_pure of a function that is costly or observable to run (a Python function): the
  // VJP is traced from the same run as the forward, so the function runs once per
  // signature, backward included
  bool trace_once = false;
};

/** How many traced signatures a function keeps (LAZYTRACE_TRACE_CACHE_SIZE, default 256). */
size_t trace_cache_capacity();

class FunctionCache;
std::shared_ptr<FunctionCache> make_function_cache(CacheOptions options);
/** Traced signatures alive in every function cache (and in the graphs that still call them). */
int64_t live_traces();

struct Entry;

/** Re-flattens the arguments with descriptions (for messages); a view of a caller's lambda,
 * valid during the call. */
struct DescribeFn {
  const void* ctx;
  pytree::Flat (*fn)(const void*);
  template <typename L>
  static DescribeFn of(const L& l) {
    return {&l, [](const void* c) { return (*static_cast<const L*>(c))(); }};
  }
  pytree::Flat operator()() const { return fn(ctx); }
};

/** One call of a cached function with one argument list. */
class CachedCall {
 public:
  /** Looks the signature up; `describe` re-flattens the arguments with descriptions. */
  CachedCall(FunctionCache& cache, pytree::Flat flat, DescribeFn describe);
  bool needs_trace() const { return !entry_; }
  /** Traces the function once for this signature (a cache miss). */
  void trace(TraceFn fn);
  /**
   * Records the call: one call node whose operands are the argument leaves, the tensors
   * the function closed over and, if it draws random numbers, the generator state. The
   * outputs get a gradient rule that runs the function's VJP, traced once beside it.
   */
  std::vector<Tensor> record();
  /** The typed result of the trace, to rebuild this call's result from its outputs. */
  const void* result() const;

 private:
  FunctionCache& cache_;
  pytree::Flat flat_;
  uint64_t key_;  // the arguments' signature, and this thread's batch rows (traced_body.h)
  // compile: per argument, 0 if it needs no gradient, 1 a leaf that does, 2 a non-leaf that
  // does (its stand-in inside is made the same way; part of the key)
  std::vector<char> grad_kinds_;
  DescribeFn describe_;
  std::shared_ptr<Entry> entry_;
  std::shared_ptr<ir::Node> pack_;  // the entry's Pack, where this call reuses it
};

}  // namespace lazytrace::tools
