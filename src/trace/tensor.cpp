#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <utility>

#include "backends/cpu/dtype_dispatch.h"
#include "core/pool.h"
#include "ir/shape_rules.h"
#include "trace/trace_context.h"

namespace lazytrace {
namespace {

TensorImpl& impl_of(const Tensor& t, const char* op) {
  if (!t.defined()) fail(op, "the tensor is undefined (default-constructed); assign it first.");
  return *t.impl();
}

}  // namespace

// The live pending tensors recorded by one thread: an intrusive list that only that
// thread touches, so linking and unlinking are a few pointer writes, with no lock and no
// allocation. A tensor whose last handle dies on another thread is handed back through
// `released` (a lock-free stack) and destroyed by its own thread at its next op or sync.
struct PendingList {
  TensorImpl* head = nullptr;
  std::atomic<TensorImpl*> released{nullptr};
  // Set when the thread has ended: its tensors are then destroyed by whoever drops them.
  // Guarded by `mu`, which only a handle dropped on another thread takes.
  std::mutex mu;
  bool ended = false;
};

namespace {

void destroy_impl(TensorImpl* p) {
  p->~TensorImpl();
  PoolFor<TensorImpl>::deallocate(p);
}

void drain_released(PendingList& list) {
  for (TensorImpl* p = list.released.exchange(nullptr, std::memory_order_acquire); p;) {
    TensorImpl* next = p->next_released;
    destroy_impl(p);
    p = next;
  }
}

// A thread's list outlives the thread where tensors it recorded still point at it, so the
// lists are kept here; at thread exit the list is marked ended and emptied, and freed where
// no tensor points at it any more (every tensor that does is linked into it).
struct ListRegistry {
  std::mutex mu;
  std::vector<std::unique_ptr<PendingList>> lists;
};
ListRegistry& registry() {
  static auto* r = new ListRegistry();  // lists may be used during static destruction
  return *r;
}

// What an ended thread records into (a tensor made by a thread_local's destructor after
// its list was freed): never linked, since no sync of that thread can come.
PendingList& ended_list() {
  static auto* l = [] {
    auto* e = new PendingList();
    e->ended = true;
    return e;
  }();
  return *l;
}

thread_local PendingList* t_list = nullptr;

// Marks the thread's list ended when the thread exits, frees what was handed back, and the
// list itself where nothing points at it.
struct ListExitGuard {
  ~ListExitGuard() {
    PendingList* list = t_list;
    {
      std::lock_guard<std::mutex> lock(list->mu);
      list->ended = true;
      drain_released(*list);
      if (list->head) return;  // pending tensors point at it: kept for them
    }
    t_list = &ended_list();
    std::lock_guard<std::mutex> lock(registry().mu);
    auto& lists = registry().lists;
    for (size_t i = 0; i < lists.size(); ++i)
      if (lists[i].get() == list) {
        lists[i] = std::move(lists.back());
        lists.pop_back();
        break;
      }
  }
};

PendingList& my_list() {
  if (!t_list) {
    auto owned = std::make_unique<PendingList>();
    t_list = owned.get();
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().lists.push_back(std::move(owned));
    }
    static thread_local ListExitGuard guard;
  }
  return *t_list;
}

struct ImplDeleter {
  void operator()(TensorImpl* p) const {
    PendingList* list = p->owner;
    if (list && list != t_list) {  // (t_list: a thread that only drops makes no list)
      std::lock_guard<std::mutex> lock(list->mu);
      if (!list->ended) {  // hand it back: only the owner thread edits its list
        TensorImpl* head = list->released.load(std::memory_order_relaxed);
        do {
          p->next_released = head;
        } while (!list->released.compare_exchange_weak(head, p, std::memory_order_release,
                                                       std::memory_order_relaxed));
        return;
      }
    }
    destroy_impl(p);
  }
};

std::shared_ptr<TensorImpl> new_impl(Shape shape, DType dtype) {
  void* mem = PoolFor<TensorImpl>::allocate();
  auto* p = new (mem) TensorImpl(std::move(shape), dtype);
  p->context = trace::current_context_id();
  return std::shared_ptr<TensorImpl>(p, ImplDeleter{}, PoolAllocator<TensorImpl>());
}

}  // namespace

// What a call's flattening and the tape's checks read stays in the first cache line.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(TensorImpl, autograd) + sizeof(TensorImpl::autograd) <= 64 &&
                  offsetof(TensorImpl, type_key) < 64 && offsetof(TensorImpl, context) < 64,
              "TensorImpl's first line no longer holds what a call's flattening reads");
#pragma GCC diagnostic pop

TensorImpl::~TensorImpl() {
  unlink();
}

void TensorImpl::link() {
  if (owner || context != 0) return;  // a traced body's tensors are never synced
  PendingList& list = my_list();
  if (&list == &ended_list()) return;
  if (list.released.load(std::memory_order_relaxed)) drain_released(list);
  next = list.head;
  prev = nullptr;
  if (next) next->prev = this;
  list.head = this;
  owner = &list;
}

void TensorImpl::unlink() {
  // Only the owning thread edits its list; it drops entries that are no longer pending
  // when it next gathers them.
  if (!owner || owner != t_list) return;
  if (prev)
    prev->next = next;
  else
    owner->head = next;
  if (next) next->prev = prev;
  prev = next = nullptr;
  owner = nullptr;
}

namespace trace {

thread_local int OpScope::depth_ = 0;

size_t pending_lists() {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().lists.size();
}

std::vector<TensorImpl*> pending_tensors() {
  std::vector<TensorImpl*> out;
  PendingList& list = my_list();
  drain_released(list);
  for (TensorImpl* p = list.head; p;) {
    TensorImpl* next = p->next;
    if (!p->pending())
      p->unlink();  // computed by a sync on another thread
    else
      out.push_back(p);
    p = next;
  }
  return out;
}

Tensor make_pending(ir::NodePtr node) {
  auto impl = new_impl(node->shape, node->dtype);
  impl->node = std::move(node);
  impl->link();
  metrics::trace_count.add();
  return Tensor(std::move(impl));
}

namespace {
std::atomic<uint64_t> g_write_epoch{0};
}  // namespace

void set_value(TensorImpl& impl, ir::NodePtr node) {
  g_write_epoch.fetch_add(1, std::memory_order_relaxed);
  if (node->op == ir::OpKind::Data) {  // already a buffer of the right type and shape: share it
    impl.buffer = node->buffer();
    impl.node = std::move(node);
    impl.unlink();
    return;
  }
  impl.node = std::move(node);
  impl.buffer.reset();
  impl.link();
  metrics::trace_count.add();
}

uint64_t write_epoch() {
  return g_write_epoch.load(std::memory_order_relaxed);
}

Tensor make_materialized(runtime::BufferPtr buffer, DType dtype, Shape shape) {
  auto impl = new_impl(std::move(shape), dtype);
  // The Data node that stands for the buffer in graphs, made now: made on first use, two
  // threads recording with one tensor (shared weights) could each make one and drop the
  // other's while it is in use.
  impl->node = ir::make_data(buffer, dtype, impl->shape);
  impl->buffer = std::move(buffer);
  return Tensor(std::move(impl));
}

Tensor tensor_of(ir::NodePtr node) {
  if (node->op != ir::OpKind::Data) return make_pending(std::move(node));
  auto impl = new_impl(node->shape, node->dtype);
  impl->buffer = node->buffer();
  impl->node = std::move(node);
  return Tensor(std::move(impl));
}

const ir::NodePtr& node_of(const Tensor& t) {
  TensorImpl& impl = impl_of(t, "trace");
  if (impl.context != current_context_id()) {
    if (current_context_id() == 0) escaped_from_trace("trace");
    return lift(t);
  }
  return impl.node;
}

const runtime::BufferPtr& materialize(const Tensor& t) {
  TensorImpl& impl = impl_of(t, "trace");
  check_not_tracing("reading a tensor's values (item(), to_vector(), a host if)");
  if (impl.pending()) sync({t});
  return impl.materialized();
}

namespace {
struct Rng {
  std::mutex mu;
  uint64_t seed = 0, offset = 0;
};
Rng& rng() {
  static Rng r;
  return r;
}
}  // namespace

RngDraw draw_random(uint64_t n) {
  Rng& r = rng();
  std::lock_guard<std::mutex> lock(r.mu);
  RngDraw d{r.seed, r.offset};
  r.offset += n;
  return d;
}

void seed_random(uint64_t seed) {
  Rng& r = rng();
  std::lock_guard<std::mutex> lock(r.mu);
  r.seed = seed;
  r.offset = 0;
}

}  // namespace trace

const Shape& Tensor::shape() const {
  return impl_of(*this, "shape").shape;
}
DType Tensor::dtype() const {
  return impl_of(*this, "dtype").dtype;
}
bool Tensor::is_pending() const {
  // inside a trace, an outer tensor stands for whatever value it has at each call
  return impl_of(*this, "is_pending").pending() || trace::is_outer(*this);
}

int64_t Tensor::size(int dim) const {
  const Shape& s = shape();
  int nd = s.size();
  if (dim < -nd || dim >= nd)
    fail("size", "dim ", dim, " is out of range for a tensor of shape ", s.str(),
         "; expected a dim in [", -nd, ", ", nd - 1, "].");
  return s[dim < 0 ? dim + nd : dim];
}

std::string Tensor::type_str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_short(dtype())) + shape().str();
}

void Tensor::check_one_element(const char* op) const {
  impl_of(*this, op);  // an undefined tensor, named by op
  if (numel() != 1)
    fail(op, "a tensor of shape ", shape().str(), " has ", numel(),
         " elements; only a one-element tensor converts to a scalar. Use to_vector() for all "
         "elements, or reduce first.");
}

size_t Tensor::host_elements(const char* op, size_t itemsize) const {
  impl_of(*this, op);
  trace::materialize(*this);
  const auto n = static_cast<size_t>(numel());
  // what std::vector could never hold (its max_size) is said here, not as std::length_error
  if (n > static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max()) / itemsize)
    fail(op, "a host copy of ", type_str(), " would take more bytes than 64 bits count.");
  return n;
}

void Tensor::host_out_of_memory(const char* op, size_t itemsize) const {
  runtime::OutOfMemory(static_cast<size_t>(numel()) * itemsize)
      .rethrow_for(op, "a host copy of " + type_str());
}

namespace {

// Whether s converts to the integer type D without overflow (NaN never does); any value
// converts to a floating or bool D.
template <typename D, typename S>
bool fits_in(S s) {
  if constexpr (!std::is_integral_v<D> || std::is_same_v<D, bool> || std::is_same_v<S, bool>) {
    return true;
  } else if constexpr (std::is_integral_v<S>) {
    return std::in_range<D>(s);
  } else {
    const double x = cpu::convert<double>(s), lo = std::numeric_limits<D>::min();
    return (x > lo - 1.0 || x == lo) && x < -lo;  // truncated toward zero; NaN fails
  }
}

}  // namespace

void Tensor::read_into(DType as, void* out, const char* op) const {
  impl_of(*this, op);
  const runtime::BufferPtr& buf = trace::materialize(*this);
  metrics::ScopedTimer timer(metrics::transfer_to_host_time);
  metrics::transfer_to_host.add();
  const int64_t n = numel();
  cpu::dispatch(dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    const S* src = static_cast<const S*>(buf->data());
    cpu::dispatch(as, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      D* dst = static_cast<D*>(out);
      for (int64_t i = 0; i < n; ++i) {
        if (!fits_in<D>(src[i])) {
          std::ostringstream value;  // an int64 as it is, not rounded to a double
          if constexpr (std::is_integral_v<S>)
            value << static_cast<int64_t>(src[i]);
          else
            value << cpu::convert<double>(src[i]);
          fail(op, "element ", i, " of a ", type_str(), " tensor, ", value.str(),
               ", does not fit in ", dtype_name(as),
               "; read it as a wider type (a double, an int64_t).");
        }
        dst[i] = cpu::convert<D>(src[i]);
      }
    });
  });
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const bool fl = is_floating(t.dtype());
  std::vector<double> v = t.to_vector<double>();
  const Shape& s = t.shape();
  // nested brackets, row-major
  std::vector<int64_t> strides = contiguous_strides(s);
  std::ostringstream o;
  o.precision(fl ? 6 : 17);
  std::function<void(int, int64_t)> rec = [&](int d, int64_t base) {
    if (d == s.size()) {
      if (t.dtype() == DType::bool_)
        o << (v[static_cast<size_t>(base)] != 0 ? "true" : "false");
      else
        o << v[static_cast<size_t>(base)];
      return;
    }
    o << "[";
    for (int64_t i = 0; i < s[d]; ++i) {
      if (i) o << ", ";
      rec(d + 1, base + i * strides[static_cast<size_t>(d)]);
    }
    o << "]";
  };
  rec(0, 0);
  return os << "tensor(" << o.str() << ", dtype=" << dtype_name(t.dtype()) << ")";
}

}  // namespace lazytrace
