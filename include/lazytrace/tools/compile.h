#pragma once
/**
 * compile(fn, options): run a whole step as one graph, like torch_xla.compile.
 *
 *   auto step = lt::compile(train_step, {.name = "train_step", .max_different_graphs = 1});
 *   for (...) loss = step(x, y);   // traced once per signature, one graph run per call
 *
 * A call syncs what was pending before it (a graph named "<name>_clear_pending"), records
 * fn as one call of its traced body (traced once per signature, as assume_pure does),
 * syncs what the call computed, its results and the tensors it wrote (a graph named
 * "<name>"), and returns the results materialized. Metrics count
 * per name: "ExecuteCount[<name>]", "CompileCount[<name>]". With full_graph, a read of a
 * tensor value inside fn (item(), to_vector(), a host if) is an lt::Error; without it,
 * such a function runs as plain lazy code for that signature (its reads sync as usual).
 * max_different_graphs = N makes an (N+1)th signature an lt::Error saying what differed.
 *
 * fn may be a whole training step: backward() runs inside on stand-ins of the parameters,
 * and writes into tensors from outside (an optimizer's copy_) or into its arguments become
 * extra results of the traced body, copied into those tensors after each call. Gradients
 * computed inside stay inside (call zero_grad() in fn, as a step does): a fn that runs
 * backward() and neither uses the gradients of outer tensors (an optimizer step) nor returns
 * any of them is an lt::Error. A backward inside starts from no gradient: a call where a
 * tensor it reaches already has a grad() from outside (which eager code would add to) is an
 * lt::Error, unless fn sets that grad itself first (zero_grad() before backward()).
 */
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "lazytrace/tools/assume_pure.h"

namespace lazytrace {

struct CompileOptions {
  bool full_graph = false;
  std::string name{};            // an initializer, so designated initializers may leave it out
  int max_different_graphs = 0;  // 0: no limit
};

namespace tools {
/** Syncs `tensors` (null: every pending tensor) as one graph named `name`. */
void sync_named(const std::vector<Tensor>* tensors, const std::string& name);
/**
 * Runs `traced`; if the function read a tensor value while being traced, throws the
 * full_graph error (full_graph) or returns false (the caller runs it as plain code).
 */
bool run_traced(const std::function<void()>& traced, const CompileOptions& options);
}  // namespace tools

template <typename F>
class CompiledFunction {
 public:
  CompiledFunction(F fn, CompileOptions options)
      : fn_(std::move(fn)),
        options_(std::move(options)),
        cache_(
            tools::make_function_cache({.tool = "compile",
                                        .name = options_.name.empty() ? "compiled" : options_.name,
                                        .max_different_graphs = options_.max_different_graphs,
                                        .count_as_compile = true,
                                        .functional_writes = true})),
        eager_(std::make_shared<std::set<uint64_t>>()) {
    if (options_.name.empty()) options_.name = "compiled";
  }

  template <typename... Args>
  auto operator()(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    tools::sync_named(nullptr, options_.name + "_clear_pending");
    pytree::Flat flat;
    pytree::flatten_args(flat, args...);
    std::shared_ptr<R> result;
    if (!eager_->count(flat.hash())) {
      const bool traced = tools::run_traced(
          [&] { result = std::make_shared<R>(tools::call_cached(fn_, *cache_, args...)); },
          options_);
      if (!traced) eager_->insert(flat.hash());
    }
    if (!result) result = std::make_shared<R>(fn_(args...));
    // everything pending now is the call's: its results and what it wrote (an optimizer's
    // updates), which a later call would otherwise compute in its "_clear_pending" graph
    tools::sync_named(nullptr, options_.name);
    return *result;
  }

 private:
  F fn_;
  CompileOptions options_;
  std::shared_ptr<tools::FunctionCache> cache_;
  std::shared_ptr<std::set<uint64_t>> eager_;  // signatures whose function reads values
};

/** fn as one compiled graph per call; see CompileOptions. */
template <typename F>
CompiledFunction<F> compile(F fn, CompileOptions options = {}) {
  return CompiledFunction<F>(std::move(fn), std::move(options));
}

}  // namespace lazytrace
