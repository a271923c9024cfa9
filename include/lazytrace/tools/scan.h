#pragma once
/**
 * scan, while_loop and fori_loop: loops whose body is traced once and compiled once, run
 * by the backend without returning to the host, like jax.lax.scan and torch_xla's scan.
 *
 *   auto [final, ys] = lt::scan([](const lt::Tensor& c, const lt::Tensor& x) {
 *     lt::Tensor s = c + x;
 *     return std::pair{s, s};
 *   }, init, xs);
 *
 * fn(carry, x) -> (new_carry, y): carry, x and y may be any pytree (Tensor, Tree, vectors,
 * tuples, pairs, nn::ParamMap); x is one slice of xs along its first dim, and ys stacks the
 * y of each iteration. The new carry must keep init's structure, shapes and dtypes. Tensors
 * fn uses without receiving them are lifted into loop inputs (and receive gradients); random
 * ops draw different numbers on each iteration. The gradient of a scan is a reverse scan
 * whose body is fn's VJP, traced once; ScanOptions::remat picks what the forward keeps for
 * it: every intermediate value the VJP needs (save), or only the carries, recomputing the
 * body in backward (recompute: the memory of one iteration instead of all of them).
 */
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "lazytrace/ops/ops.h"
#include "lazytrace/tools/pytree.h"

namespace lazytrace {

/** What the backward pass of a loop keeps: all residuals, or carries only (recompute). */
enum class Remat { save, recompute };

struct ScanOptions {
  bool reverse = false;     // iterate from the last slice of xs to the first
  bool is_fn_pure = false;  // trace fn once per fn (type and captures) and signature, then reuse
  Remat remat = Remat::save;
};

namespace tools {

/** What tracing a loop body once gives: the leaves of its results and their typed form. */
struct LoopTraced {
  std::vector<Tensor> carry, ys;  // while: ys holds the condition
  std::shared_ptr<void> ys_like;  // scan: the typed y, to rebuild ys from
};
/** Runs the body on placeholders for the carry leaves, one x slice's leaves, and consts. */
using LoopTraceFn =
    std::function<LoopTraced(const std::vector<Tensor>& carry, const std::vector<Tensor>& x,
                             const std::vector<Tensor>& consts)>;

struct ScanArgs {
  std::vector<const Tensor*> init, xs, consts;  // consts: the same every iteration
  ScanOptions options;
  uint64_t cache_key = 0;  // is_fn_pure: fn (identity_of) and the signature; 0: no cache
  const char* tool = "scan";
  std::function<std::vector<std::string>()> xs_paths;  // for messages
};

struct ScanOutputs {
  std::vector<Tensor> carry, ys;
  std::shared_ptr<void> ys_like;
};

/** Traces (or finds) the body and records the loop, with its gradient. */
ScanOutputs run_scan(const ScanArgs& args, const LoopTraceFn& fn);
/** Forgets the loop bodies kept for is_fn_pure (and the functions they hold). */
void clear_scan_cache();

/** Traces cond and body (fn returns the next carries, and the condition as ys[0]) and
 * records the loop. */
std::vector<Tensor> run_while(const std::vector<const Tensor*>& init, const LoopTraceFn& fn);

/** Throws the "[scan] carry changed" error, naming the first leaf that differs. */
[[noreturn]] void carry_mismatch(const char* tool, const pytree::Flat& before,
                                 const pytree::Flat& after);
/** Throws the "body output is not a pair" error for a Tree result. */
[[noreturn]] void not_a_pair(const char* tool, const std::string& got);

template <typename T>
struct IsPairLike : std::false_type {};
template <typename A, typename B>
struct IsPairLike<std::pair<A, B>> : std::true_type {};
template <typename A, typename B>
struct IsPairLike<std::tuple<A, B>> : std::true_type {};

/** fn's (new_carry, y) as a pair, with the carry of type C. */
template <typename C, typename R>
auto split_result(const char* tool, R&& r) {
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, Tree>) {
    if (!r.is_list() || r.size() != 2) not_a_pair(tool, r.structure());
    if constexpr (std::is_same_v<C, Tensor>) {
      return std::pair<C, Tree>{r[0].tensor(), r[1]};
    } else {
      static_assert(std::is_same_v<C, Tree>,
                    "lazytrace: a Tree result needs a Tree or Tensor carry");
      return std::pair<C, Tree>{r[0], r[1]};
    }
  } else {
    static_assert(IsPairLike<D>::value,
                  "lazytrace: [scan] fn must return std::pair{new_carry, y} (or a std::tuple "
                  "of two, or a Tree list of two)");
    using A = std::decay_t<std::tuple_element_t<0, D>>;
    using B = std::decay_t<std::tuple_element_t<1, D>>;
    static_assert(std::is_same_v<A, C> || std::is_convertible_v<A, C>,
                  "lazytrace: [scan] fn must return the new carry with init's type");
    return std::pair<C, B>{C(std::get<0>(r)), std::get<1>(r)};
  }
}

/** The error for fori_loop bounds more than 2^63 - 1 apart. */
[[noreturn]] void fori_loop_range_too_long(int64_t lower, int64_t upper);

/**
 * fn's identity for is_fn_pure's cache: its type and, where it captures anything, its bytes.
 * Another object of the same lambda that captures other numbers, tensors or shared_ptrs by
 * value is another function, as another Python closure is (the cached body's copy of fn
 * keeps what they point to, so their addresses are not reused). Captures by reference are
 * compared by address: a variable they name that changes is not seen, as in JAX. A capture
 * by value whose copy has other bytes (a std::vector or std::string: its copy owns other
 * memory, so a later one could reuse the address and look the same) makes fn unidentifiable:
 * 0, and the body is traced at each call. Pass such values as arguments (xs, the carry) or
 * as tensors instead. Padding bytes that differ likewise only cost a trace.
 */
template <typename F>
size_t identity_of(const F& fn) {
  pytree::Flat key;
  key.mix(static_cast<uint64_t>(typeid(F).hash_code()));
  if constexpr (!std::is_empty_v<F>) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(std::addressof(fn));
    if constexpr (!std::is_trivially_copyable_v<F>) {
      const F copy(fn);
      if (std::memcmp(std::addressof(copy), bytes, sizeof(F)) != 0) return 0;
    }
    for (size_t at = 0; at < sizeof(F); at += sizeof(uint64_t)) {
      uint64_t word = 0;
      std::memcpy(&word, bytes + at, std::min(sizeof(uint64_t), sizeof(F) - at));
      key.mix(word);
    }
  }
  return static_cast<size_t>(key.hash()) | 1;
}

/**
 * scan with consts: fn(carry, x, consts) where consts (any pytree) are inputs of every
 * iteration, passed explicitly (scan_layers' extra arguments), so a cached body reads the
 * ones of each call. `fn_key` identifies fn for is_fn_pure (identity_of; 0: it cannot be,
 * so the body is traced at each call).
 */
template <typename F, typename C, typename X, typename K>
auto scan_with(const F& fn, const C& init, const X& xs, const K& consts, ScanOptions opts,
               size_t fn_key, const char* tool = "scan") {
  using R = std::decay_t<std::invoke_result_t<const F&, const C&, const X&, const K&>>;
  using P = decltype(split_result<C>(tool, std::declval<R>()));
  using Y = typename P::second_type;
  pytree::Flat fc = pytree::flatten(init), fx = pytree::flatten(xs), fk = pytree::flatten(consts);
  ScanArgs args{fc.leaves, fx.leaves, fk.leaves, opts, 0, tool, [&xs] {
                  return pytree::flatten(xs, true).leaf_paths;
                }};
  if (opts.is_fn_pure && fn_key != 0) {
    pytree::Flat key;
    key.mix(static_cast<uint64_t>(fn_key));
    key.mix(fc.hash());
    key.mix(fx.hash());
    key.mix(fk.hash());
    args.cache_key = key.hash() | 1;
  }
  // The structures, kept with the trace for retracing (backward): by value, with
  // placeholders in place of the first call's tensors once traced.
  struct Like {
    F fn;
    C init;
    X xs;
    K consts;
    uint64_t init_hash;
  };
  auto like = std::make_shared<Like>(Like{fn, init, xs, consts, fc.hash()});
  LoopTraceFn trace = [like, tool](const std::vector<Tensor>& c, const std::vector<Tensor>& x,
                                   const std::vector<Tensor>& k) {
    pytree::Cursor cc{c}, cx{x}, ck{k};
    like->init = pytree::Traits<C>::rebuild(like->init, cc);
    like->xs = pytree::Traits<X>::rebuild(like->xs, cx);
    like->consts = pytree::Traits<K>::rebuild(like->consts, ck);
    P out = split_result<C>(tool, like->fn(like->init, like->xs, like->consts));
    pytree::Flat nc = pytree::flatten(out.first);
    if (nc.hash() != like->init_hash)
      carry_mismatch(tool, pytree::flatten(like->init, true), pytree::flatten(out.first, true));
    LoopTraced t;
    t.carry = nc.tensors();
    t.ys = pytree::flatten(out.second).tensors();
    t.ys_like = std::make_shared<Y>(out.second);
    return t;
  };
  ScanOutputs o = run_scan(args, trace);
  pytree::Cursor cc{o.carry}, cy{o.ys};
  C carry = pytree::Traits<C>::rebuild(init, cc);
  Y ys = pytree::Traits<Y>::rebuild(*static_cast<const Y*>(o.ys_like.get()), cy);
  return std::pair<C, Y>{std::move(carry), std::move(ys)};
}

}  // namespace tools

/**
 * Loops fn(carry, x) -> (new_carry, y) over the first dim of xs; returns (final carry,
 * ys). See the top of this header.
 */
template <typename F, typename C, typename X>
auto scan(const F& fn, const C& init, const X& xs, ScanOptions options = {}) {
  auto body = [fn](const C& c, const X& x, const std::tuple<>&) { return fn(c, x); };
  return tools::scan_with(body, init, xs, std::tuple<>{}, options, tools::identity_of(fn));
}

namespace tools {
template <typename T>
struct IsTuple : std::false_type {};
template <typename... Ts>
struct IsTuple<std::tuple<Ts...>> : std::true_type {};

/** f(v...) for a tuple v, else f(v). */
template <typename F, typename V>
decltype(auto) apply_carry(const F& f, const V& v) {
  if constexpr (IsTuple<V>::value)
    return std::apply(f, v);
  else
    return f(v);
}
}  // namespace tools

/**
 * Runs body_fn while cond_fn holds, in the backend: cond_fn(carry...) returns a bool
 * scalar tensor, body_fn(carry...) the next carry with the same structure, shapes and
 * dtypes. A std::tuple init is passed as separate arguments, like torch's while_loop:
 *
 *   auto [i, x] = lt::while_loop([](const Tensor& i, const Tensor&) { return i > 0; },
 *                                [](const Tensor& i, const Tensor& x) {
 *                                  return std::tuple{i - 1, x + 1};
 *                                }, std::tuple{lt::tensor({10}), lt::tensor({3})});
 *
 * Not differentiable (reverse mode needs the iteration count in advance): use fori_loop
 * with integer bounds or scan.
 */
template <typename Cond, typename Body, typename Init>
Init while_loop(const Cond& cond_fn, const Body& body_fn, const Init& init) {
  pytree::Flat fi = pytree::flatten(init);
  const uint64_t init_hash = fi.hash();
  tools::LoopTraceFn trace = [&](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                                 const std::vector<Tensor>&) {
    pytree::Cursor cur{c};
    Init carry = pytree::Traits<Init>::rebuild(init, cur);
    Tensor cond = tools::apply_carry(cond_fn, carry);
    auto next = tools::apply_carry(body_fn, carry);
    static_assert(std::is_convertible_v<decltype(next), Init>,
                  "lazytrace: [while_loop] body_fn must return the carry with init's type");
    Init nc(next);
    pytree::Flat fn = pytree::flatten(nc);
    if (fn.hash() != init_hash)
      tools::carry_mismatch("while_loop", pytree::flatten(init, true), pytree::flatten(nc, true));
    tools::LoopTraced t;
    t.carry = fn.tensors();
    t.ys = {cond};
    return t;
  };
  std::vector<Tensor> out = tools::run_while(fi.leaves, trace);
  pytree::Cursor cur{out};
  return pytree::Traits<Init>::rebuild(init, cur);
}

/**
 * body_fn(i, carry) -> carry for i in [lower, upper) (i an int64 scalar tensor). Integer
 * bounds make it a scan (differentiable; lower >= upper runs nothing); tensor bounds
 * (int64 scalars) a while_loop.
 */
template <typename Body, typename Init>
Init fori_loop(int64_t lower, int64_t upper, const Body& body_fn, const Init& init) {
  int64_t n = 0;
  if (upper > lower && __builtin_sub_overflow(upper, lower, &n))
    tools::fori_loop_range_too_long(lower, upper);
  n = std::max<int64_t>(n, 0);
  // counted from 0, then offset in int64: bounds past 2^53 are not doubles
  Tensor is = arange(static_cast<double>(n)) + Scalar(static_cast<long>(lower));
  auto fn = [body_fn](const Init& c, const Tensor& i, const std::tuple<>&) {
    return std::pair<Init, Tree>{Init(body_fn(i, c)), Tree()};
  };
  return tools::scan_with(fn, init, is, std::tuple<>{}, ScanOptions{}, typeid(Body).hash_code(),
                          "fori_loop")
      .first;
}

template <typename Body, typename Init>
Init fori_loop(const Tensor& lower, const Tensor& upper, const Body& body_fn, const Init& init) {
  for (const Tensor* t : {&lower, &upper})
    if (!t->defined() || t->dtype() != DType::int64 || t->numel() != 1)
      fail("fori_loop", "tensor bounds must be int64 scalars, got ",
           t->defined() ? t->type_str() : std::string("an undefined tensor"),
           "; make them with lt::tensor({n}) or pass integers.");
  using C = std::tuple<Tensor, Tensor, Init>;
  C out = while_loop([](const Tensor& i, const Tensor& hi, const Init&) { return i < hi; },
                     [&body_fn](const Tensor& i, const Tensor& hi, const Init& c) {
                       return C{i + 1, hi, Init(body_fn(i, c))};
                     },
                     C{reshape(lower, Shape{}), reshape(upper, Shape{}), init});
  return std::get<2>(out);
}

}  // namespace lazytrace
