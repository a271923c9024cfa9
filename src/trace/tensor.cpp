#include <cstring>
#include <functional>
#include <sstream>

#include "backends/cpu/dtype_dispatch.h"
#include "core/pool.h"
#include "trace/tensor_impl.h"

namespace lazytrace {
namespace {

// Live pending tensors of this thread, as an intrusive list: linking and unlinking are a
// few pointer writes, with no lock and no allocation.
thread_local TensorImpl* t_pending_head = nullptr;

TensorImpl& impl_of(const Tensor& t, const char* op) {
  if (!t.defined()) fail(op, "the tensor is undefined (default-constructed); assign it first.");
  return *t.impl();
}

}  // namespace

TensorImpl::~TensorImpl() { unlink(); }

void TensorImpl::link() {
  if (linked) return;
  next = t_pending_head;
  prev = nullptr;
  if (next) next->prev = this;
  t_pending_head = this;
  linked = true;
}

void TensorImpl::unlink() {
  if (!linked) return;
  if (prev)
    prev->next = next;
  else
    t_pending_head = next;
  if (next) next->prev = prev;
  prev = next = nullptr;
  linked = false;
}

namespace trace {

thread_local int OpScope::depth_ = 0;

std::vector<TensorImpl*> pending_impls() {
  std::vector<TensorImpl*> out;
  for (TensorImpl* p = t_pending_head; p; p = p->next) out.push_back(p);
  return out;
}

Tensor make_pending(ir::NodePtr node) {
  auto impl = std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>(), node->shape, node->dtype);
  impl->node = std::move(node);
  impl->link();
  metrics::trace_count.add();
  return Tensor(std::move(impl));
}

void set_pending(TensorImpl& impl, ir::NodePtr node) {
  impl.node = std::move(node);
  impl.buffer.reset();
  impl.link();
  metrics::trace_count.add();
}

Tensor make_materialized(runtime::BufferPtr buffer, DType dtype, Shape shape) {
  auto impl = std::make_shared<TensorImpl>(std::move(shape), dtype);
  impl->buffer = std::move(buffer);
  return Tensor(std::move(impl));
}

const ir::NodePtr& node_of(const Tensor& t) {
  TensorImpl& impl = impl_of(t, "trace");
  if (!impl.node) impl.node = ir::make_data(impl.buffer, impl.dtype, impl.shape);
  return impl.node;
}

const runtime::BufferPtr& materialize(const Tensor& t) {
  TensorImpl& impl = impl_of(t, "trace");
  if (impl.pending()) sync({t});
  return impl.buffer;
}

RngState& rng() {
  static RngState state;
  return state;
}

}  // namespace trace

const Shape& Tensor::shape() const { return impl_of(*this, "shape").shape; }
DType Tensor::dtype() const { return impl_of(*this, "dtype").dtype; }
bool Tensor::is_pending() const { return impl_of(*this, "is_pending").pending(); }

int64_t Tensor::size(int dim) const {
  const Shape& s = shape();
  int nd = s.size();
  if (dim < -nd || dim >= nd)
    fail("size", "dim ", dim, " is out of range for a tensor of shape ", s.str(), "; expected a dim in [",
         -nd, ", ", nd - 1, "].");
  return s[dim < 0 ? dim + nd : dim];
}

std::string Tensor::type_str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_short(dtype())) + shape().str();
}

void Tensor::check_one_element(const char* op) const {
  if (numel() != 1)
    fail(op, "a tensor of shape ", shape().str(), " has ", numel(),
         " elements; only a one-element tensor converts to a scalar. Use to_vector() for all "
         "elements, or reduce first.");
}

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
      for (int64_t i = 0; i < n; ++i) dst[i] = cpu::convert<D>(src[i]);
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
