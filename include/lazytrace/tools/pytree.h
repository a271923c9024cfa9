#pragma once
/**
 * Flattening C++ arguments and results into tensor leaves plus a structure key, and
 * rebuilding them, for the function-level tools (assume_pure, compile, scan). Supported:
 * Tensor, Tree, std::vector, std::tuple and std::pair of supported types, and static
 * values (bool, integers, floating numbers, enums, std::string), which are part of the key
 * but carry no tensor. Other libraries add their types by specializing pytree::Traits
 * (nn::ParamMap does).
 */
#include <cstdint>
#include <cstring>
#include <forward_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazytrace/trace/tree.h"

namespace lazytrace::pytree {

/** Whether the pass prefetch_leaves is on (lists of tensors load their leaves ahead). */
bool prefetch_leaves_on();

/** The trace this thread records into (0: none). */
uint32_t current_trace_context();

/** What a trace cache checks of a leaf on each call (Flat::states). */
struct LeafState {
  const void* node;  // its node (TensorImpl::node), or null where it is another trace's
  const void* grad;  // its autograd metadata (a leaf's gradient slot), or null
  uint8_t kind;      // 0: requires no grad, 1: a leaf that requires grad, 2: has history
};

/** An argument list (or a result) taken apart. */
struct Flat {
  // The leaves, by address: the arguments outlive the call, and a leaf made while
  // flattening (a Tree's) is kept in `owned` (a list: addresses stay, and an empty one
  // allocates nothing). No handle is copied on the hot path.
  std::vector<const Tensor*> leaves;
  std::forward_list<Tensor> owned;
  const Tensor& own(Tensor t) { return owned.emplace_front(std::move(t)); }
  /** Copies of the leaves. */
  std::vector<Tensor> tensors() const {
    std::vector<Tensor> out;
    out.reserve(leaves.size());
    for (const Tensor* t : leaves) out.push_back(*t);
    return out;
  }
  // Where each top-level argument's leaves end (flatten_args): a call passes an argument
  // with many leaves (a model's weights) in a Pack it can reuse while they are unchanged.
  std::vector<uint32_t> arg_ends;
  void end_argument() { arg_ends.push_back(static_cast<uint32_t>(leaves.size())); }
  // The key: structure and static values in order (`mix`, a chain of steps), and the dict
  // keys and leaf types (`absorb`): the sum of each word times a random odd number for its
  // position (a multilinear hash, which no two sequences of words are likely to share), so
  // that a call with hundreds of leaves does not wait on a chain of hundreds of steps. Each
  // chain step also takes the number absorbed before it: the key holds how the two interleave.
  uint64_t chain = 0x6a09e667f3bcc908ULL;
  uint64_t sum = 0;
  uint64_t absorbed = 0;
  /** The key: structure, static values, dict keys, leaf shapes and dtypes. */
  uint64_t hash() const {
    return (chain ^ (sum + 0x9e3779b97f4a7c15ULL + (chain << 6) + (chain >> 2))) *
           0xff51afd7ed558ccdULL;
  }
  // Describing (for error messages and cache-miss explanations): one entry per part of
  // the key, "argument 0: f32[2, 3]", in order. Off on the hot path.
  bool describing = false;
  std::vector<std::string> parts;
  std::vector<std::string> leaf_paths;  // describing: the path of each leaf
  std::string path;

  void mix(uint64_t v) {
    v ^= absorbed * 0xc2b2ae3d27d4eb4fULL;
    chain ^= v + 0x9e3779b97f4a7c15ULL + (chain << 6) + (chain >> 2);
    chain *= 0xff51afd7ed558ccdULL;
  }
  void mix(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    mix(h ^ s.size());
  }
  /** A word that enters the key on its own, at the next position (a dict key, a leaf). */
  void absorb(uint64_t w);
  void describe(std::string what) {
    if (describing) parts.push_back(path + ": " + what);
  }
  /** A tensor leaf: its type enters the key. */
  void add_leaf(const Tensor& t);
  /** Leaves at once, loading each tensor's metadata ahead (pass prefetch_leaves), with a
   * word absorbed before each where `key_words` is given (a dict replayed); not while
   * describing. */
  void add_leaves(const Tensor* const* ts, const uint64_t* key_words, size_t n);
  /** Leaves stored in an array, `stride` bytes apart (a vector of tensors, of pairs). */
  void add_leaves(const Tensor* first, size_t n, size_t stride = sizeof(Tensor));

  // Per leaf, what a trace cache checks of it (function_cache.h), read while add_leaf has the
  // tensor's metadata at hand, so that a call with hundreds of leaves reads each of them
  // once. Gathered outside a trace only (`context` 0), where no tensor stands for another.
  // A call with fewer leaves than kStatesFrom gathers none (nor allocates for them).
  std::vector<LeafState> states;
  uint32_t context = current_trace_context();
  static constexpr size_t kStatesFrom = 16;
  bool has_states() const {
    return context == 0 && !states.empty() && states.size() == leaves.size();
  }

  bool prefetch = prefetch_leaves_on();        // pass prefetch_leaves
  static constexpr size_t kPrefetchAhead = 8;  // leaves between a prefetch and its read
  /** A static value: its kind and printed value enter the key. */
  void add_static(std::string_view kind, const std::string& value) {
    mix(kind);
    mix(value);
    describe(std::string(kind) + " " + value);
  }
  /** A container's shape ("list of 3", a dict's keys): enters the key. */
  void add_node(const std::string& what) {
    mix(what);
    describe(what);
  }
};

/** Runs f with flat.path extended by step() (made only while describing). */
template <typename S, typename F>
void at_path(Flat& flat, S&& step, F&& f) {
  if (!flat.describing) return f();
  const size_t n = flat.path.size();
  flat.path += step();
  f();
  flat.path.resize(n);
}

/** "[i]", a list or tuple item's path step (appended, which g++ 12 checks without noise). */
inline std::string index_path(size_t i) {
  std::string s("[");
  s.append(std::to_string(i)).append("]");
  return s;
}

/** Leaves consumed in order while rebuilding. */
struct Cursor {
  const std::vector<Tensor>& leaves;
  size_t at = 0;
  const Tensor& next();
};

template <typename T, typename Enable = void>
struct Traits {
  static_assert(sizeof(T) == 0,
                "lazytrace: this argument type cannot be passed to assume_pure/compile/scan; "
                "use Tensor, Tree, std::vector, std::tuple/std::pair, nn::ParamMap, or a static "
                "bool/int/double/enum/std::string");
};

template <>
struct Traits<Tensor> {
  static void flatten(const Tensor& t, Flat& f) { f.add_leaf(t); }
  static Tensor rebuild(const Tensor&, Cursor& c) { return c.next(); }
};

template <>
struct Traits<Tree> {
  static void flatten(const Tree& t, Flat& f) {
    f.add_node("tree " + t.structure());
    std::vector<Tensor> leaves = t.leaves();
    for (size_t i = 0; i < leaves.size(); ++i)
      at_path(
          f, [&] { return t.leaf_path(i); }, [&] { f.add_leaf(f.own(leaves[i])); });
  }
  static Tree rebuild(const Tree& like, Cursor& c) {
    std::vector<Tensor> leaves(like.leaves().size());
    for (Tensor& t : leaves) t = c.next();
    return like.with_leaves(leaves);
  }
};

template <typename T>
struct Traits<std::vector<T>> {
  static void flatten(const std::vector<T>& v, Flat& f) {
    f.mix(uint64_t{0x4c});
    f.mix(v.size());
    if (f.describing) f.describe("list of " + std::to_string(v.size()));
    if constexpr (std::is_same_v<T, Tensor>)
      if (!f.describing) return f.add_leaves(v.data(), v.size());
    for (size_t i = 0; i < v.size(); ++i)
      at_path(
          f, [&] { return index_path(i); }, [&] { Traits<T>::flatten(v[i], f); });
  }
  static std::vector<T> rebuild(const std::vector<T>& like, Cursor& c) {
    std::vector<T> out;
    out.reserve(like.size());
    for (const T& x : like) out.push_back(Traits<T>::rebuild(x, c));
    return out;
  }
};

template <typename... Ts>
struct Traits<std::tuple<Ts...>> {
  static void flatten(const std::tuple<Ts...>& t, Flat& f) {
    f.mix(uint64_t{0x54} + sizeof...(Ts));
    if (f.describing) f.describe("tuple of " + std::to_string(sizeof...(Ts)));
    flatten_items(t, f, std::index_sequence_for<Ts...>{});
  }
  static std::tuple<Ts...> rebuild(const std::tuple<Ts...>& like, Cursor& c) {
    return rebuild_items(like, c, std::index_sequence_for<Ts...>{});
  }

 private:
  template <size_t... I>
  static void flatten_items(const std::tuple<Ts...>& t, Flat& f, std::index_sequence<I...>) {
    (at_path(
         f, [] { return index_path(I); },
         [&] { Traits<std::decay_t<Ts>>::flatten(std::get<I>(t), f); }),
     ...);
  }
  template <size_t... I>
  static std::tuple<Ts...> rebuild_items(const std::tuple<Ts...>& like, Cursor& c,
                                         std::index_sequence<I...>) {
    // braced initialization evaluates left to right: leaves are consumed in order
    return std::tuple<Ts...>{Traits<std::decay_t<Ts>>::rebuild(std::get<I>(like), c)...};
  }
};

template <typename A, typename B>
struct Traits<std::pair<A, B>> {
  static void flatten(const std::pair<A, B>& p, Flat& f) {
    f.mix(uint64_t{0x50});
    if (f.describing) f.describe("pair");
    at_path(
        f, [] { return std::string("[0]"); }, [&] { Traits<A>::flatten(p.first, f); });
    at_path(
        f, [] { return std::string("[1]"); }, [&] { Traits<B>::flatten(p.second, f); });
  }
  static std::pair<A, B> rebuild(const std::pair<A, B>& like, Cursor& c) {
    A a = Traits<A>::rebuild(like.first, c);
    B b = Traits<B>::rebuild(like.second, c);
    return {std::move(a), std::move(b)};
  }
};

// ---- static values: part of the key, never traced
template <typename T>
struct Traits<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>> {
  static void flatten(const T& v, Flat& f) {
    if constexpr (std::is_same_v<T, bool>) {
      f.add_static("bool", v ? "true" : "false");
    } else if constexpr (std::is_enum_v<T>) {
      f.add_static("enum", std::to_string(static_cast<int64_t>(v)));
    } else if constexpr (std::is_integral_v<T>) {
      f.add_static("int", std::to_string(v));
    } else {
      // the exact bits enter the key; the printed value is for messages
      uint64_t bits = 0;
      const double d = static_cast<double>(v);
      std::memcpy(&bits, &d, sizeof bits);
      f.mix(bits);
      f.describe("double " + std::to_string(d));
    }
  }
  static T rebuild(const T& like, Cursor&) { return like; }
};

template <>
struct Traits<std::string> {
  static void flatten(const std::string& s, Flat& f) { f.add_static("string", "'" + s + "'"); }
  static std::string rebuild(const std::string& like, Cursor&) { return like; }
};

template <>
struct Traits<const char*> {
  static void flatten(const char* s, Flat& f) {
    f.add_static("string", "'" + std::string(s) + "'");
  }
  static const char* rebuild(const char* like, Cursor&) { return like; }
};
/** How an argument is kept and flattened: decayed, a string literal (char[N]) as const char*. */
template <typename T>
using Kept =
    std::conditional_t<std::is_same_v<std::decay_t<T>, char*>, const char*, std::decay_t<T>>;

/** Flattens a whole argument list; argument i's parts are described as "argument i". */
template <typename... Args>
void flatten_args(Flat& f, const Args&... args) {
  [[maybe_unused]] size_t i = 0;  // unused for a function of no arguments
  (at_path(
       f, [&] { return "argument " + std::to_string(i); },
       [&] {
         Traits<Kept<Args>>::flatten(args, f);
         f.end_argument();
         ++i;
       }),
   ...);
}

template <typename T>
Flat flatten(const T& value, bool describing = false) {
  Flat f;
  f.describing = describing;
  Traits<T>::flatten(value, f);
  return f;
}

}  // namespace lazytrace::pytree
