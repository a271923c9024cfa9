#include "lazytrace/tools/pytree.h"

#include "runtime/passes.h"
#include "trace/tensor_impl.h"
#include "trace/trace_context.h"

namespace lazytrace::pytree {

bool prefetch_leaves_on() {
  return runtime::current_pass_on(runtime::Pass::PrefetchLeaves);
}

uint32_t current_trace_context() {
  return trace::current_context_id();
}

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The random odd multiplier of each position (Flat::absorb), the first ones in a table.
constexpr size_t kPositionTable = 4096;
const uint64_t* position_table() {
  static const std::vector<uint64_t> table = [] {
    std::vector<uint64_t> t(kPositionTable);
    for (size_t i = 0; i < t.size(); ++i) t[i] = splitmix(i) | 1;
    return t;
  }();
  return table.data();
}

// A word times its position's multiplier, its high bits folded in first (so that words
// that differ only there differ in the product's low bits too).
uint64_t absorb_word(const uint64_t* table, uint64_t w, uint64_t position) {
  const uint64_t m = position < kPositionTable ? table[position] : splitmix(position) | 1;
  return (w ^ (w >> 29)) * m;
}

[[noreturn]] void undefined_leaf(const Flat& f) {
  fail("pytree", "a tensor leaf", f.describing ? " at " + f.path : std::string(),
       " is undefined; pass tensors made by ops or lt::tensor().");
}

// A leaf's type folded into one word with cheap steps, made once per tensor. (A lookup
// compares the types too, so a collision costs a retrace, never a wrong graph.)
uint64_t type_word(const TensorImpl& impl) {
  uint64_t w = impl.type_key.load(std::memory_order_relaxed);
  if (w != 0) return w;
  const Shape& s = impl.shape;
  w = (static_cast<uint64_t>(impl.dtype) | 0x100) ^ (static_cast<uint64_t>(s.size()) << 12);
  for (int64_t d : s) w = ((w << 21) | (w >> 43)) ^ static_cast<uint64_t>(d);
  if (w == 0) w = 0x9e3779b97f4a7c15ULL;  // 0 means "not made yet"
  impl.type_key.store(w, std::memory_order_relaxed);
  return w;
}

LeafState state_of(const TensorImpl& impl) {
  const uint8_t kind = impl.grad_fn ? 2 : impl.requires_grad ? 1 : 0;
  return {impl.context == 0 ? impl.node.get() : nullptr, impl.autograd.get(), kind};
}

// Whether the leaves' states are gathered once the flat holds `leaves` leaves (then from the
// first: a call with a few tensors allocates none), and those of the leaves before then.
bool gather_states(Flat& f, size_t leaves) {
  if (f.context != 0 || leaves < Flat::kStatesFrom) return false;
  for (size_t i = f.states.size(); i < f.leaves.size(); ++i)
    f.states.push_back(state_of(*f.leaves[i]->impl()));
  return true;
}

void prefetch_impl(const Tensor& t) {
  const auto* p = reinterpret_cast<const char*>(t.impl().get());
  if (!p) return;
  __builtin_prefetch(p);  // the first line: all the flattening reads (TensorImpl)
}

// Flat::add_leaves: leaf(i) is the i-th tensor; object(i) its address where the tensors are
// reached through pointers (loaded a further kPrefetchAhead ahead), else null. The key's sum
// and position stay in registers.
template <typename Leaf, typename Object>
void add_all(Flat& f, size_t n, const uint64_t* key_words, const Leaf& leaf, const Object& object) {
  const size_t ahead = Flat::kPrefetchAhead;
  // room for the leaves of the arguments after these (a few inputs after the weights)
  const size_t room = f.leaves.size() + n + n / 8 + 16;
  f.leaves.reserve(room);
  const bool gather = gather_states(f, f.leaves.size() + n);
  if (gather) f.states.reserve(room);
  uint64_t sum = f.sum, position = f.absorbed;
  const uint64_t* table = position_table();
  for (size_t i = 0; i < n; ++i) {
    if (f.prefetch) {
      if (const void* o = i + 2 * ahead < n ? object(i + 2 * ahead) : nullptr)
        __builtin_prefetch(o);
      if (i + ahead < n) prefetch_impl(leaf(i + ahead));
    }
    if (key_words) sum += absorb_word(table, key_words[i], position++);
    const Tensor& t = leaf(i);
    const TensorImpl* impl = t.impl().get();
    if (!impl) {
      f.sum = sum;
      f.absorbed = position;
      undefined_leaf(f);
    }
    sum += absorb_word(table, type_word(*impl), position++);
    f.leaves.push_back(&t);
    if (gather) f.states.push_back(state_of(*impl));
  }
  f.sum = sum;
  f.absorbed = position;
}

}  // namespace

void Flat::absorb(uint64_t w) {
  sum += absorb_word(position_table(), w, absorbed++);
}

void Flat::add_leaf(const Tensor& t) {
  if (!t.defined()) undefined_leaf(*this);
  const TensorImpl& impl = *t.impl();
  absorb(type_word(impl));
  const bool gather = gather_states(*this, leaves.size() + 1);
  leaves.push_back(&t);
  if (gather) states.push_back(state_of(impl));
  if (describing) {
    describe(t.type_str());
    leaf_paths.push_back(path);
  }
}

void Flat::add_leaves(const Tensor* const* ts, const uint64_t* key_words, size_t n) {
  add_all(
      *this, n, key_words, [&](size_t i) -> const Tensor& { return *ts[i]; },
      [&](size_t i) -> const void* { return ts[i]; });
}

void Flat::add_leaves(const Tensor* first, size_t n, size_t stride) {
  const char* at = reinterpret_cast<const char*>(first);
  add_all(
      *this, n, nullptr,
      [&](size_t i) -> const Tensor& { return *reinterpret_cast<const Tensor*>(at + i * stride); },
      [](size_t) -> const void* { return nullptr; });
}

const Tensor& Cursor::next() {
  if (at >= leaves.size())
    fail("pytree", "ran out of tensors rebuilding a structure (", leaves.size(),
         " given); the structure changed between flattening and rebuilding.");
  return leaves[at++];
}

}  // namespace lazytrace::pytree
