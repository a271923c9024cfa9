#include "ir/node.h"

#include <algorithm>
#include <atomic>

#include "core/hash.h"
#include "core/pool.h"
#include "lazytrace/core/error.h"

namespace lazytrace::ir {

Attrs& Attrs::operator=(const Attrs& o) {
  if (this == &o) return *this;
  n = o.n;
  flag = o.flag;
  inline_ = o.inline_;
  heap_.reset();
  if (o.heap_) {
    heap_ = std::make_unique<int64_t[]>(kMax);
    std::copy(o.begin(), o.end(), heap_.get());
  }
  return *this;
}

void Attrs::push(int64_t v) {
  if (n >= kMax) fail("ir", "too many attributes (more than ", kMax, ")");
  if (n < kInline) {
    inline_[n++] = v;
    return;
  }
  if (!heap_) {
    heap_ = std::make_unique<int64_t[]>(kMax);
    std::copy(inline_.begin(), inline_.end(), heap_.get());
  }
  heap_[n++] = v;
}

uint64_t Attrs::hash() const {
  uint64_t h = hash_step(0xcbf29ce484222325ULL, static_cast<uint64_t>(n) | (flag ? 0x100 : 0));
  for (int i = 0; i < n; ++i) h = hash_step(h, static_cast<uint64_t>((*this)[i]));
  return h;
}

namespace {

uint64_t local_hash_of(const Node& n) {
  uint64_t h = hash_step(0x84222325cbf29ce4ULL, (static_cast<uint64_t>(n.op) << 8) |
                                                    static_cast<uint64_t>(n.dtype) |
                                                    (static_cast<uint64_t>(n.shape.size()) << 16));
  for (int64_t d : n.shape) h = hash_step(h, static_cast<uint64_t>(d));
  if (n.attrs.n || n.attrs.flag) h = hash_step(h, n.attrs.hash());
  if (n.op == OpKind::Scalar)
    h = hash_step(h, n.scalar_is_param ? 0x5ca1a9ULL : hash_double(n.value));
  return hash_mix(h);
}

// Nodes released while another node is being destroyed are queued here instead of
// being destroyed recursively.
thread_local std::vector<NodePtr>* t_release_queue = nullptr;

}  // namespace

Node::Node(OpKind op_, DType dtype_, Shape shape_, NodePtr* operands, int n, Attrs attrs_)
    : op(op_), dtype(dtype_), shape(std::move(shape_)), attrs(attrs_) {
  if (n > kInline) {  // one allocation for the rest (a call's inputs, a concat's parts)
    more_ = std::make_unique<std::vector<NodePtr>>();
    more_->reserve(static_cast<size_t>(n - kInline));
  }
  for (int i = 0; i < n; ++i) {
    if (n_inline_ < kInline)
      inline_[n_inline_++] = std::move(operands[i]);
    else
      more_->push_back(std::move(operands[i]));
  }
}

Node::~Node() {
  if (n_inline_ == 0) return;  // a leaf: nothing to release
  if (t_release_queue) {
    for (int i = 0; i < n_inline_; ++i)
      if (inline_[i]) t_release_queue->push_back(std::move(inline_[i]));
    if (more_)
      for (auto& o : *more_) t_release_queue->push_back(std::move(o));
    return;
  }
  std::vector<NodePtr> queue;
  t_release_queue = &queue;
  for (int i = 0; i < n_inline_; ++i)
    if (inline_[i]) queue.push_back(std::move(inline_[i]));
  if (more_)
    for (auto& o : *more_) queue.push_back(std::move(o));
  while (!queue.empty()) {
    NodePtr n = std::move(queue.back());
    queue.pop_back();
    n.reset();  // may push this node's operands onto the queue
  }
  t_release_queue = nullptr;
}

// A shape whose element or byte count does not fit in 64 bits would wrap and compute garbage.
void check_size(const char* op, DType dtype, const Shape& shape) {
  int64_t n = static_cast<int64_t>(itemsize(dtype));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      fail(op, "a ", dtype_name(dtype), " tensor of shape ", shape.str(),
           " has more bytes than 64 bits can count (more than any memory holds); make it "
           "smaller.");
}

namespace {

NodePtr make_node_impl(OpKind op, DType dtype, Shape shape, NodePtr* operands, int count,
                       Attrs attrs) {
  check_size(op_name(op), dtype, shape);
  auto n = std::allocate_shared<Node>(PoolAllocator<Node>(), op, dtype, std::move(shape), operands,
                                      count, attrs);
  n->local_hash = local_hash_of(*n);
  uint64_t h = n->local_hash;
  const int k = n->num_operands();
  if (k <= 8) {
    for (int i = 0; i < k; ++i) h = hash_combine(h, n->operand(i)->hash);
  } else {
    // a call with a model's weights has hundreds of operands: four independent chains
    uint64_t lane[4] = {h, h ^ 0x243f6a8885a308d3ULL, h ^ 0x13198a2e03707344ULL,
                        h ^ 0xa4093822299f31d0ULL};
    int i = 0;
    for (; i + 4 <= k; i += 4)
      for (int j = 0; j < 4; ++j) lane[j] = hash_combine(lane[j], n->operand(i + j)->hash);
    for (; i < k; ++i) lane[0] = hash_combine(lane[0], n->operand(i)->hash);
    h = hash_combine(hash_combine(hash_combine(lane[0], lane[1]), lane[2]), lane[3]);
  }
  n->hash = h;
  return n;
}
}  // namespace

NodePtr make_node(OpKind op, DType dtype, Shape shape, Attrs attrs) {
  return make_node_impl(op, dtype, std::move(shape), nullptr, 0, attrs);
}
NodePtr make_node(OpKind op, DType dtype, Shape shape, NodePtr a, Attrs attrs) {
  return make_node_impl(op, dtype, std::move(shape), &a, 1, attrs);
}
NodePtr make_node(OpKind op, DType dtype, Shape shape, NodePtr a, NodePtr b, Attrs attrs) {
  NodePtr ops[2] = {std::move(a), std::move(b)};
  return make_node_impl(op, dtype, std::move(shape), ops, 2, attrs);
}
NodePtr make_node(OpKind op, DType dtype, Shape shape, NodePtr a, NodePtr b, NodePtr c,
                  Attrs attrs) {
  NodePtr ops[3] = {std::move(a), std::move(b), std::move(c)};
  return make_node_impl(op, dtype, std::move(shape), ops, 3, attrs);
}
NodePtr make_node(OpKind op, DType dtype, Shape shape, std::vector<NodePtr> operands, Attrs attrs) {
  return make_node_impl(op, dtype, std::move(shape), operands.data(),
                        static_cast<int>(operands.size()), attrs);
}

void Node::set_results(const std::vector<NodePtr>& results) {
  results_ = std::make_unique<std::vector<std::weak_ptr<Node>>>(results.begin(), results.end());
}

std::vector<NodePtr> Node::live_results() const {
  std::vector<NodePtr> live;
  if (results_)
    for (const std::weak_ptr<Node>& r : *results_)
      if (NodePtr n = r.lock()) live.push_back(std::move(n));
  return live;
}

void Node::become_data(std::shared_ptr<runtime::Buffer> buffer) {
  std::vector<NodePtr> released;  // destroyed at the end, iteratively, like any chain
  for (int i = 0; i < n_inline_; ++i) released.push_back(std::move(inline_[i]));
  if (more_)
    for (auto& o : *more_) released.push_back(std::move(o));
  n_inline_ = 0;
  more_.reset();
  op = OpKind::Data;
  attrs = Attrs{};
  value = 0;
  ivalue = 0;
  scalar_is_param = false;
  payload = std::move(buffer);
  local_hash = local_hash_of(*this);
  hash = local_hash;
}

NodePtr make_scalar(double value, int64_t ivalue, DType dtype) {
  auto n = std::allocate_shared<Node>(PoolAllocator<Node>(), OpKind::Scalar, dtype, Shape{},
                                      nullptr, 0, Attrs{});
  n->value = value;
  n->ivalue = ivalue;
  n->scalar_is_param = !(value == 0.0 || value == 1.0 || value == -1.0);
  n->scalar_literal = true;
  n->local_hash = local_hash_of(*n);
  n->hash = n->local_hash;
  return n;
}

NodePtr make_scalar_param(double value, int64_t ivalue, DType dtype) {
  auto n = std::allocate_shared<Node>(PoolAllocator<Node>(), OpKind::Scalar, dtype, Shape{},
                                      nullptr, 0, Attrs{});
  n->value = value;
  n->ivalue = ivalue;
  n->scalar_is_param = true;
  n->local_hash = local_hash_of(*n);
  n->hash = n->local_hash;
  return n;
}

NodePtr make_data(std::shared_ptr<runtime::Buffer> buffer, DType dtype, Shape shape) {
  auto n = std::allocate_shared<Node>(PoolAllocator<Node>(), OpKind::Data, dtype, std::move(shape),
                                      nullptr, 0, Attrs{});
  n->payload = std::move(buffer);
  n->local_hash = local_hash_of(*n);
  n->hash = n->local_hash;
  return n;
}

uint32_t next_walk_epoch() {
  // One counter for all threads: nodes are shared, so a stamp must never repeat.
  static std::atomic<uint32_t> epoch{0};
  return epoch.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace lazytrace::ir
