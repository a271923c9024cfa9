// The tracing context behind TraceScope: lifting outer tensors, the body's random inputs,
// and refusing reads while a function is being traced.
#include <atomic>
#include <cstring>
#include <unordered_map>

#include "core/check.h"
#include "runtime/buffer.h"
#include "trace/trace_context.h"

namespace lazytrace::trace {

thread_local uint32_t g_context_id = 0;
thread_local const TensorImpl* g_lifting = nullptr;
thread_local uint32_t g_syncs_started = 0;

struct TraceContext {
  uint32_t id;
  std::string tool;
  int next_param = 0;
  std::vector<BodyInput> inputs;
  std::vector<Tensor> lifted, lifted_ph;
  std::unordered_map<const TensorImpl*, size_t> lifted_index;
  TraceScope::LiftGrad lift_grad = TraceScope::LiftGrad::none;
  bool writes_allowed = false;
  std::vector<Tensor> written;
  int explicit_count = 0, extra_count = 0;
  ir::NodePtr rng_seed, rng_offset;
  uint64_t rng_count = 0;

  Tensor placeholder(const Shape& shape, DType dtype, BodyInput in) {
    inputs.push_back(in);
    return make_pending(ir::make_param(next_param++, dtype, shape));
  }
};

namespace {

thread_local TraceContext* g_ctx = nullptr;

void enter(TraceContext* c) {
  g_ctx = c;
  g_context_id = c ? c->id : 0;
}
std::atomic<uint32_t> g_next_id{1};
const std::string& kNoTool = *new std::string();  // never destroyed: threads at exit read it

ir::NodePtr rng_input(TraceContext& c, BodyInput::Kind kind) {
  c.inputs.push_back({kind, 0});
  return ir::make_param(c.next_param++, DType::int64, Shape{});
}

}  // namespace

const Tensor& lifted_placeholder(const Tensor& t) {
  TraceContext& c = *g_ctx;
  auto it = c.lifted_index.find(t.impl().get());
  if (it == c.lifted_index.end()) {
    const int k = static_cast<int>(c.lifted.size());
    Tensor ph = c.placeholder(t.shape(), t.dtype(), {BodyInput::Lifted, k});
    g_lifting = t.impl().get();  // while its stand-in is made, t.requires_grad() is t's own
    const bool grad = c.lift_grad == TraceScope::LiftGrad::all ||
                      (c.lift_grad == TraceScope::LiftGrad::same && t.requires_grad());
    g_lifting = nullptr;
    if (grad && is_floating(t.dtype())) ph.requires_grad_();
    c.lifted.push_back(t);
    c.lifted_ph.push_back(ph);
    it = c.lifted_index.emplace(t.impl().get(), static_cast<size_t>(k)).first;
  }
  return c.lifted_ph[it->second];
}

void escaped_from_trace(const char* op) {
  fail(op,
       "a tensor made inside a traced function (assume_pure, compile, a loop body) is used "
       "outside it, where it has no value: return it from the function instead of keeping it "
       "(in a list, a global, an attribute).");
}

bool same_data(const ir::Node& a, const ir::Node& b) {
  using Held = std::shared_ptr<runtime::Buffer>;
  const Held *x = std::get_if<Held>(&a.payload), *y = std::get_if<Held>(&b.payload);
  if (!x || !y || !*x || !*y) return !x == !y && (!x || !*x == !*y);
  return *x == *y || ((*x)->bytes() == (*y)->bytes() &&
                      std::memcmp((*x)->data(), (*y)->data(), (*x)->bytes()) == 0);
}

void check_not_tracing(const char* what) {
  if (g_ctx)
    throw TraceReadError(detail::cat(
        "[", g_ctx->tool, "] ", what,
        " inside a traced function: the function is recorded once and replayed on later "
        "calls, so its tensors have no values while it is traced. Return the tensor and "
        "read it after the call, or compute with ops instead of host code."));
}

TraceScope::TraceScope(std::string tool) : ctx_(new TraceContext()), parent_(g_ctx) {
  ctx_->id = g_next_id.fetch_add(1);
  ctx_->tool = std::move(tool);
  enter(ctx_);
}

TraceScope::~TraceScope() {
  enter(parent_);
  delete ctx_;
}

Tensor TraceScope::input(const Shape& shape, DType dtype, bool requires_grad) {
  Tensor t = ctx_->placeholder(shape, dtype, {BodyInput::Explicit, ctx_->explicit_count++});
  if (requires_grad && is_floating(dtype)) t.requires_grad_();
  return t;
}

Tensor TraceScope::extra(const Shape& shape, DType dtype) {
  return ctx_->placeholder(shape, dtype, {BodyInput::Extra, ctx_->extra_count++});
}

void TraceScope::set_lift_grad(LiftGrad mode) {
  ctx_->lift_grad = mode;
}

void TraceScope::lift_first(const std::vector<Tensor>& outer) {
  for (const Tensor& t : outer) lifted_placeholder(t);
}

void TraceScope::allow_writes() {
  ctx_->writes_allowed = true;
}

const std::vector<Tensor>& TraceScope::written() const {
  return ctx_->written;
}

bool writes_allowed() {
  return g_ctx && g_ctx->writes_allowed;
}

void write_outer(const Tensor& t, ir::NodePtr node) {
  LT_CHECK(writes_allowed(), "an outer tensor is written only where the trace allows it");
  TraceContext& c = *g_ctx;
  Tensor ph = lifted_placeholder(t);  // its old value stays the input; reads now see `node`
  set_value(*ph.impl(), std::move(node));
  bool seen = false;
  for (const Tensor& w : c.written) seen = seen || w.impl() == t.impl();
  if (!seen) c.written.push_back(t);
}

std::shared_ptr<const ir::Body> TraceScope::finish(const std::vector<Tensor>& outputs,
                                                   const std::string& name,
                                                   const std::vector<int>& packed_explicit) {
  std::vector<ir::NodePtr> results;
  results.reserve(outputs.size() + ctx_->written.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined())
      fail(ctx_->tool, "output ", i, " of '", name, "' is an undefined tensor.");
    results.push_back(node_of(outputs[i]));  // an outer tensor returned as is is lifted
  }
  for (const Tensor& w : ctx_->written) results.push_back(lift(w));  // their new values
  // lifted tensors (after the packed explicit inputs) are packed: a call that reuses their
  // Pack node records in O(1)
  int explicit_count = 0;
  for (int p : packed_explicit) explicit_count += p >= 0;
  std::vector<int> packed;
  if (!ctx_->lifted.empty() || explicit_count > 0)
    for (const BodyInput& in : ctx_->inputs) {
      const auto i = static_cast<size_t>(in.index);
      packed.push_back(in.kind == BodyInput::Lifted ? explicit_count + in.index
                       : in.kind == BodyInput::Explicit && i < packed_explicit.size()
                           ? packed_explicit[i]
                           : -1);
    }
  return ir::make_body(std::move(results), ctx_->next_param, name, std::move(packed));
}

const std::vector<BodyInput>& TraceScope::inputs() const {
  return ctx_->inputs;
}
const std::vector<Tensor>& TraceScope::lifted() const {
  return ctx_->lifted;
}
const std::vector<Tensor>& TraceScope::lifted_placeholders() const {
  return ctx_->lifted_ph;
}
uint64_t TraceScope::rng_count() const {
  return ctx_->rng_count;
}

const std::string& tracing_tool() {
  return g_ctx ? g_ctx->tool : kNoTool;
}

const std::vector<Tensor>* read_only_stand_ins() {
  return g_ctx && !g_ctx->writes_allowed ? &g_ctx->lifted_ph : nullptr;
}

std::pair<ir::NodePtr, ir::NodePtr> random_operands(uint64_t n) {
  if (!g_ctx) {
    const RngDraw d = draw_random(n);
    auto param = [](uint64_t v) {
      return ir::make_scalar_param(static_cast<double>(v), static_cast<int64_t>(v), DType::int64);
    };
    return {param(d.seed), param(d.offset)};
  }
  TraceContext& c = *g_ctx;
  if (!c.rng_seed) {
    c.rng_seed = rng_input(c, BodyInput::RngSeed);
    c.rng_offset = rng_input(c, BodyInput::RngOffset);
  }
  ir::NodePtr offset = c.rng_offset;
  if (c.rng_count > 0) {
    const auto local = static_cast<int64_t>(c.rng_count);
    offset = ir::make_node(ir::OpKind::Add, DType::int64, Shape{}, offset,
                           ir::make_scalar(static_cast<double>(local), local, DType::int64));
  }
  c.rng_count += n;
  return {c.rng_seed, offset};
}

}  // namespace lazytrace::trace
