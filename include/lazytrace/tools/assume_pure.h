#pragma once
/**
 * assume_pure(fn): trace a pure function once per input signature, then record each call
 * as a single node, like torch_xla's @assume_pure.
 *
 *   auto do_math = lt::assume_pure([](const lt::Tensor& a, const lt::Tensor& b, double c) {
 *     return lt::matmul(a, b) + c;
 *   });
 *   for (int i = 0; i < 1000; ++i) y = do_math(x, w, 42.0);   // traced once
 *
 * The signature is the pytree structure of the arguments, each leaf's shape and dtype, and
 * the values of static arguments (bool, integers, doubles, enums, strings). Tensors the
 * function uses without receiving them are lifted into implicit inputs: each call reads
 * their current value (a tensor updated with copy_ or by an optimizer is seen; rebinding a
 * C++ variable captured by value is not, since the lambda holds the old handle). Random ops
 * inside draw fresh numbers on each call. Gradients flow to every argument and captured
 * tensor that requires grad; the backward pass is traced once per signature too. The
 * function must not read tensor values (item(), to_vector(), sync()) or write into tensors
 * from outside or into its arguments (copy_, an in-place op): both are lt::Errors (lt::compile
 * writes such tensors back). With LAZYTRACE_CHECK_PURITY=1 every call retraces and compares the
 * graphs, their host numbers and the values of tensors made from host data (lt::tensor(v)), which
 * catches functions that are not pure. An argument of 16 or more tensors (a model's weights) is
 * passed in one group that the next call with the same tensors reuses, so such a call costs a
 * pointer comparison per tensor; the function keeps the last call's group (the tensors' values)
 * alive until its next call or its end (pass pack_arguments).
 */
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lazytrace/tools/function_cache.h"

namespace lazytrace {
namespace tools {

/** Rebuilds a tuple of arguments with new leaves (placeholders), in order. */
template <typename... Args>
std::tuple<Args...> rebuild_args(const std::tuple<Args...>& like, pytree::Cursor& c) {
  return std::apply(
      [&](const Args&... a) { return std::tuple<Args...>{pytree::Traits<Args>::rebuild(a, c)...}; },
      like);
}

/**
 * Calls fn(args...) through `cache`: traces on a miss, records one call node, and returns
 * the result rebuilt around the call's outputs.
 */
template <typename F, typename... Args>
auto call_cached(const F& fn, FunctionCache& cache, const Args&... args) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
  pytree::Flat flat;
  pytree::flatten_args(flat, args...);
  auto describe = [&] {
    pytree::Flat d;
    d.describing = true;
    pytree::flatten_args(d, args...);
    return d;
  };
  CachedCall call(cache, std::move(flat), DescribeFn::of(describe));
  if (call.needs_trace()) {
    // The arguments' structure and static values, kept with the trace for retracing
    // (backward, purity checks). After the first trace it holds placeholders, not the
    // first call's tensors.
    auto like = std::make_shared<std::tuple<pytree::Kept<Args>...>>(args...);
    call.trace([fn, like](const std::vector<Tensor>& leaves) {
      pytree::Cursor c{leaves};
      *like = rebuild_args(*like, c);
      auto out = std::make_shared<R>(std::apply(fn, *like));
      Traced t;
      t.outputs = pytree::flatten(*out).tensors();
      t.result = out;
      return t;
    });
  }
  std::vector<Tensor> outs = call.record();
  pytree::Cursor c{outs};
  return pytree::Traits<R>::rebuild(*static_cast<const R*>(call.result()), c);
}

}  // namespace tools

/** A function traced once per input signature; see assume_pure(). */
template <typename F>
class PureFunction {
 public:
  PureFunction(F fn, std::string name)
      : fn_(std::move(fn)),
        cache_(tools::make_function_cache({.tool = "assume_pure", .name = std::move(name)})) {}

  template <typename... Args>
  auto operator()(const Args&... args) const {
    return tools::call_cached(fn_, *cache_, args...);
  }

 private:
  F fn_;
  std::shared_ptr<tools::FunctionCache> cache_;
};

/** fn, traced once per input signature and then recorded as one call node per call. */
template <typename F>
PureFunction<F> assume_pure(F fn, std::string name = "assume_pure") {
  return PureFunction<F>(std::move(fn), std::move(name));
}

}  // namespace lazytrace
