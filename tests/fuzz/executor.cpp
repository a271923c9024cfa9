// The executor: each node becomes the lazytrace call it stands for; loop and assume_pure
// bodies become lambdas that build their body program the same way.
#include "executor.h"

#include <lazytrace/lazytrace.h>

#include <memory>
#include <stdexcept>

namespace fuzz {
namespace {

using lazytrace::Scalar;
using lazytrace::Shape;
using lazytrace::Tensor;
using TV = std::vector<Tensor>;

Shape shape_of(const Dims& d) {
  return Shape(d);
}

Scalar scalar_of(double f, DType kind) {
  if (kind == DType::bool_) return Scalar(f != 0);
  if (kind == DType::int64) return Scalar(static_cast<long long>(f));
  return Scalar(f);
}

class Exec;

// An assume_pure function: builds its body program from the arguments.
struct PureBody {
  Exec* ex;
  const Program* body;
  std::shared_ptr<const TV> outer;
  TV operator()(const TV& args, double static_value) const;
};
using PureFn = lazytrace::PureFunction<PureBody>;

class Exec {
 public:
  Exec(const DataSet& data, const ExecOptions& opt) : data_(data), opt_(opt) {}

  // Builds p; vals gets every node's tensor, multi the results of multi nodes.
  void build(const Program& p, const TV* params, std::shared_ptr<const TV> outer,
             double static_value, bool top, TV& vals, std::vector<TV>& multi);

  TV run_body(const Program& body, const TV& params, std::shared_ptr<const TV> outer,
              double static_value) {
    TV vals;
    std::vector<TV> multi;
    build(body, &params, std::move(outer), static_value, false, vals, multi);
    TV out;
    for (int o : body.outputs) out.push_back(vals[static_cast<size_t>(o)]);
    return out;
  }

  std::vector<std::pair<const Node*, Tensor>> leaves, randoms;
  std::vector<std::shared_ptr<void>> keep;  // functions that must outlive the run

 private:
  Tensor input(const Node& n, bool top);
  const DataSet& data_;
  const ExecOptions& opt_;
};

TV PureBody::operator()(const TV& args, double static_value) const {
  return ex->run_body(*body, args, outer, static_value);
}

[[noreturn]] void mismatch(size_t i, const Node& n, const Tensor& t) {
  throw std::runtime_error(label(i, n.op) + ": lazytrace gives " + t.type_str() +
                           ", the program expects " + lazytrace::dtype_short(n.dtype) +
                           dims_str(n.shape));
}

Tensor Exec::input(const Node& n, bool top) {
  const std::vector<double>* src = &n.data;
  auto it = data_.inputs.find(&n);
  if (it != data_.inputs.end())
    src = &it->second;
  else if (n.data.empty())
    throw std::runtime_error("no data for an input");
  const Shape s = shape_of(n.shape);
  Tensor t;
  switch (n.dtype) {
    case DType::float32:
      t = lazytrace::tensor(std::vector<float>(src->begin(), src->end()), s);
      break;
    case DType::float64:
      t = lazytrace::tensor(*src, s);
      break;
    case DType::int32:
      t = lazytrace::tensor(std::vector<int32_t>(src->begin(), src->end()), s);
      break;
    case DType::int64:
      t = lazytrace::tensor(std::vector<int64_t>(src->begin(), src->end()), s);
      break;
    case DType::bool_: {
      std::vector<bool> b;
      for (double v : *src) b.push_back(v != 0);
      t = lazytrace::tensor(b, s);
      break;
    }
    case DType::float16:
    case DType::bfloat16:
      t = lazytrace::astype(lazytrace::tensor(std::vector<float>(src->begin(), src->end()), s),
                            n.dtype);
      if (top) lazytrace::sync({t});
      break;
  }
  if (top && opt_.grad && (n.dtype == DType::float32 || n.dtype == DType::float64)) {
    t.requires_grad_();
    leaves.emplace_back(&n, t);
  }
  return t;
}

void Exec::build(const Program& p, const TV* params, std::shared_ptr<const TV> outer,
                 double static_value, bool top, TV& vals, std::vector<TV>& multi) {
  namespace L = lazytrace;
  vals.assign(p.nodes.size(), Tensor());
  multi.assign(p.nodes.size(), {});
  // the assume_pure functions of this build, by group
  std::map<int64_t, std::shared_ptr<PureFn>> pure;
  std::shared_ptr<const TV> self;  // this program's values, for the bodies that capture them
  auto snapshot = [&] {
    // bodies read the nodes before them; a copy of the handles so far
    return std::make_shared<const TV>(vals);
  };
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& n = p.nodes[i];
    auto A = [&](size_t k) -> const Tensor& { return vals[static_cast<size_t>(n.in[k])]; };
    Tensor t;
    switch (n.op) {
      case Op::Input:
        t = input(n, top);
        break;
      case Op::Param:
        t = (*params)[static_cast<size_t>(n.ints[0])];
        break;
      case Op::Outer:
        t = (*outer)[static_cast<size_t>(n.ints[0])];
        break;
      case Op::Full:
        t = L::full(shape_of(n.shape),
                    scalar_of(n.f, lazytrace::is_floating(n.dtype) ? DType::float64 : n.dtype),
                    n.dtype);
        break;
      case Op::Arange: {
        const double start = static_cast<double>(n.ints[1]), step = static_cast<double>(n.ints[2]);
        t = L::arange(start, start + static_cast<double>(n.ints[0]) * step, step, n.dtype);
        break;
      }
      case Op::Rand:
      case Op::Randn:
        t = n.op == Op::Rand ? L::rand(shape_of(n.shape), n.dtype)
                             : L::randn(shape_of(n.shape), n.dtype);
        if (top) randoms.emplace_back(&n, t);
        break;
      case Op::Unary: {
        const Tensor& x = A(0);
        switch (static_cast<UK>(n.kind)) {
          case UK::Neg:
            t = L::neg(x);
            break;
          case UK::Exp:
            t = L::exp(x);
            break;
          case UK::Log:
            t = L::log(x);
            break;
          case UK::Log1p:
            t = L::log1p(x);
            break;
          case UK::Sin:
            t = L::sin(x);
            break;
          case UK::Cos:
            t = L::cos(x);
            break;
          case UK::Tanh:
            t = L::tanh(x);
            break;
          case UK::Sigmoid:
            t = L::sigmoid(x);
            break;
          case UK::Relu:
            t = L::relu(x);
            break;
          case UK::Gelu:
            t = L::gelu(x);
            break;
          case UK::Silu:
            t = L::silu(x);
            break;
          case UK::Sqrt:
            t = L::sqrt(x);
            break;
          case UK::Rsqrt:
            t = L::rsqrt(x);
            break;
          case UK::Abs:
            t = L::abs(x);
            break;
          case UK::Erf:
            t = L::erf(x);
            break;
          case UK::kCount:
            break;
        }
        break;
      }
      case Op::Binary: {
        const Tensor &a = A(0), &b = A(1);
        switch (static_cast<BK>(n.kind)) {
          case BK::Add:
            t = L::add(a, b);
            break;
          case BK::Sub:
            t = L::sub(a, b);
            break;
          case BK::Mul:
            t = L::mul(a, b);
            break;
          case BK::Div:
            t = L::div(a, b);
            break;
          case BK::Pow:
            t = L::pow(a, b);
            break;
          case BK::Maximum:
            t = L::maximum(a, b);
            break;
          case BK::Minimum:
            t = L::minimum(a, b);
            break;
          case BK::Atan2:
            t = L::atan2(a, b);
            break;
          case BK::Eq:
            t = L::eq(a, b);
            break;
          case BK::Ne:
            t = L::ne(a, b);
            break;
          case BK::Lt:
            t = L::lt(a, b);
            break;
          case BK::Le:
            t = L::le(a, b);
            break;
          case BK::Gt:
            t = L::gt(a, b);
            break;
          case BK::Ge:
            t = L::ge(a, b);
            break;
          case BK::kCount:
            break;
        }
        break;
      }
      case Op::BinaryScalar: {
        const Tensor& x = A(0);
        const bool st = n.ints.size() > 1 && n.ints[1];
        const Scalar s = scalar_of(st ? static_value : n.f, n.sdtype);
        const bool left = n.ints[0] != 0;
        switch (static_cast<BK>(n.kind)) {
          case BK::Add:
            t = left ? s + x : x + s;
            break;
          case BK::Sub:
            t = left ? s - x : x - s;
            break;
          case BK::Mul:
            t = left ? s * x : x * s;
            break;
          case BK::Div:
            t = left ? s / x : x / s;
            break;
          case BK::Pow:
            t = left ? L::pow(s, x) : L::pow(x, s);
            break;
          case BK::Eq:
            t = left ? s == x : x == s;
            break;
          case BK::Ne:
            t = left ? s != x : x != s;
            break;
          case BK::Lt:
            t = left ? s < x : x < s;
            break;
          case BK::Le:
            t = left ? s <= x : x <= s;
            break;
          case BK::Gt:
            t = left ? s > x : x > s;
            break;
          case BK::Ge:
            t = left ? s >= x : x >= s;
            break;
          case BK::Maximum:
          case BK::Minimum:
          case BK::Atan2:
          case BK::kCount:
            throw std::runtime_error("no scalar form of this op");
        }
        break;
      }
      case Op::Where:
        t = L::where(A(0), A(1), A(2));
        break;
      case Op::WhereScalar: {
        const Scalar s = scalar_of(n.f, n.sdtype);
        t = n.ints[0] ? L::where(A(0), s, A(1)) : L::where(A(0), A(1), s);
        break;
      }
      case Op::Cast:
        t = L::astype(A(0), n.dtype);
        break;
      case Op::Reshape: {
        Dims target = n.shape;
        if (n.ints[0] >= 0) target[static_cast<size_t>(n.ints[0])] = -1;
        t = L::reshape(A(0), shape_of(target));
        break;
      }
      case Op::Transpose:
        t = L::transpose(A(0), static_cast<int>(n.ints[0]), static_cast<int>(n.ints[1]));
        break;
      case Op::Permute:
        t = L::permute(A(0), std::vector<int>(n.ints.begin(), n.ints.end()));
        break;
      case Op::BroadcastTo:
        t = L::broadcast_to(A(0), shape_of(n.shape));
        break;
      case Op::Slice:
        t = L::slice(A(0), static_cast<int>(n.ints[0]), n.ints[1], n.ints[2], n.ints[3]);
        break;
      case Op::Select:
        t = L::select(A(0), static_cast<int>(n.ints[0]), n.ints[1]);
        break;
      case Op::Unsqueeze:
        t = L::unsqueeze(A(0), static_cast<int>(n.ints[0]));
        break;
      case Op::Squeeze:
        t = L::squeeze(A(0), static_cast<int>(n.ints[0]));
        break;
      case Op::Concat:
      case Op::Stack: {
        TV parts;
        for (size_t k = 0; k < n.in.size(); ++k) parts.push_back(A(k));
        t = n.op == Op::Concat ? L::concat(parts, static_cast<int>(n.ints[0]))
                               : L::stack(parts, static_cast<int>(n.ints[0]));
        break;
      }
      case Op::IndexSelect:
        t = L::index_select(A(0), static_cast<int>(n.ints[0]), A(1));
        break;
      case Op::IndexAdd:
        t = L::index_add(A(0), static_cast<int>(n.ints[0]), A(1), A(2));
        break;
      case Op::Sum:
      case Op::Mean:
      case Op::Amax: {
        const Tensor& x = A(0);
        std::vector<int> dims;
        const bool keep = n.ints[1] != 0;
        if (n.ints[0]) {
          for (int d = 0; d < x.ndim(); ++d) dims.push_back(d);
        } else {
          for (size_t j = 2; j < n.ints.size(); ++j) dims.push_back(static_cast<int>(n.ints[j]));
        }
        const bool all = n.ints[0] && !keep;
        if (n.op == Op::Sum) t = all ? L::sum(x) : L::sum(x, dims, keep);
        if (n.op == Op::Mean) t = all ? L::mean(x) : L::mean(x, dims, keep);
        if (n.op == Op::Amax) t = all ? L::amax(x) : L::amax(x, dims, keep);
        break;
      }
      case Op::Softmax:
        t = L::softmax(A(0), static_cast<int>(n.ints[0]));
        break;
      case Op::LogSoftmax:
        t = L::log_softmax(A(0), static_cast<int>(n.ints[0]));
        break;
      case Op::Matmul:
        t = L::matmul(A(0), A(1));
        break;
      case Op::Scan: {
        const auto nc = static_cast<size_t>(n.ints[0]);
        TV init, xs;
        for (size_t k = 0; k < n.in.size(); ++k) (k < nc ? init : xs).push_back(A(k));
        auto cap = snapshot();
        const Program* body = &n.bodies[0];
        auto fn = [this, body, cap, nc](const TV& c, const TV& x) {
          TV params = c;
          params.insert(params.end(), x.begin(), x.end());
          TV out = run_body(*body, params, cap, 0);
          TV carry(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(nc));
          TV ys(out.begin() + static_cast<std::ptrdiff_t>(nc), out.end());
          return std::pair<TV, TV>{carry, ys};
        };
        lazytrace::ScanOptions so;
        so.reverse = n.ints[1] != 0;
        so.remat = n.ints[2] ? lazytrace::Remat::recompute : lazytrace::Remat::save;
        auto [carry, ys] = L::scan(fn, init, xs, so);
        TV res = carry;
        res.insert(res.end(), ys.begin(), ys.end());
        multi[i] = res;
        break;
      }
      case Op::Fori: {
        const size_t first = n.ints[2] ? 2 : 0;
        TV init;
        for (size_t k = first; k < n.in.size(); ++k) init.push_back(A(k));
        auto cap = snapshot();
        const Program* body = &n.bodies[0];
        auto fn = [this, body, cap](const Tensor& it, const TV& c) {
          TV params = {it};
          params.insert(params.end(), c.begin(), c.end());
          return run_body(*body, params, cap, 0);
        };
        multi[i] = n.ints[2] ? L::fori_loop(A(0), A(1), fn, init)
                             : L::fori_loop(n.ints[0], n.ints[1], fn, init);
        break;
      }
      case Op::While: {
        TV init;
        for (size_t k = 0; k < n.in.size(); ++k) init.push_back(A(k));
        auto cap = snapshot();
        const Program* body = &n.bodies[0];
        const size_t nc = init.size();
        auto cond = [this, body, cap, nc](const TV& c) { return run_body(*body, c, cap, 0)[nc]; };
        auto step = [this, body, cap, nc](const TV& c) {
          TV out = run_body(*body, c, cap, 0);
          out.resize(nc);
          return out;
        };
        multi[i] = L::while_loop(cond, step, init);
        break;
      }
      case Op::Pure: {
        auto& fn = pure[n.ints[0]];
        if (!fn) {
          fn = std::make_shared<PureFn>(PureBody{this, &n.bodies[0], snapshot()}, "fuzz_pure");
          keep.push_back(fn);
        }
        TV args;
        for (size_t k = 0; k < n.in.size(); ++k) args.push_back(A(k));
        multi[i] = (*fn)(args, n.f);
        break;
      }
      case Op::Proj:
        t = multi[static_cast<size_t>(n.in[0])].at(static_cast<size_t>(n.ints[0]));
        break;
    }
    if (is_multi(n.op)) {
      const TV& r = multi[i];
      if (r.size() != n.rdtypes.size())
        throw std::runtime_error(label(i, n.op) + ": " + std::to_string(r.size()) +
                                 " results, expected " + std::to_string(n.rdtypes.size()));
      continue;
    }
    if (!t.defined()) throw std::runtime_error(label(i, n.op) + ": no tensor");
    if (t.dtype() != n.dtype || t.shape() != shape_of(n.shape)) mismatch(i, n, t);
    if (top && n.materialize) lazytrace::sync({t});
    vals[i] = t;
  }
}

}  // namespace

ExecResult execute(const Program& p, const DataSet& data, const ExecOptions& opt) {
  ExecResult r;
  try {
    lazytrace::manual_seed(opt.random_seed);
    Exec ex(data, opt);
    TV vals;
    std::vector<TV> multi;
    ex.build(p, nullptr, nullptr, 0, true, vals, multi);
    TV outs;
    for (int o : p.outputs) outs.push_back(vals[static_cast<size_t>(o)]);
    std::vector<std::pair<const Node*, Tensor>> randoms = ex.randoms;
    Tensor loss;
    if (opt.grad) {
      for (size_t k = 0; k < outs.size(); ++k) {
        const Tensor& o = outs[k];
        if (!lazytrace::is_floating(o.dtype())) continue;
        const std::vector<double>& w = (*opt.loss_weights)[k];
        Tensor wt = lazytrace::astype(lazytrace::tensor(w, o.shape()), o.dtype());
        Tensor term = lazytrace::sum(o * wt);
        loss = loss.defined() ? loss + term : term;
      }
    }
    if (opt.release_inputs) {
      vals.clear();
      multi.clear();
    }
    TV leaves;
    if (opt.grad && loss.defined() && loss.requires_grad()) {
      loss.backward();
      for (auto& [node, t] : ex.leaves) leaves.push_back(t);
    }
    ex.leaves.clear();
    TV all = outs;
    for (auto& [node, t] : randoms) all.push_back(t);
    TV grads;
    for (const Tensor& l : leaves) {
      Tensor g = l.grad();
      grads.push_back(g);
      if (g.defined()) all.push_back(g);
    }
    if (opt.sync_all)
      lazytrace::sync();
    else
      lazytrace::sync(all);
    for (const Tensor& o : outs) r.outputs.push_back(o.to_vector<double>());
    for (auto& [node, t] : randoms) r.random[node] = t.to_vector<double>();
    if (opt.grad) {
      size_t k = 0;
      for (const Node& n : p.nodes)
        if (n.op == Op::Input && (n.dtype == DType::float32 || n.dtype == DType::float64)) {
          // no backward (no floating output depends on an input): no gradients
          const Tensor g = k < grads.size() ? grads[k] : Tensor();
          ++k;
          r.grads[&n] = g.defined() ? g.to_vector<double>() : std::vector<double>();
        }
    }
    outs.clear();
    all.clear();
    grads.clear();
    leaves.clear();
    randoms.clear();
    loss = Tensor();
    lazytrace::sync();  // nothing of this run stays pending
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
    try {
      lazytrace::sync();
    } catch (const std::exception&) {
    }
  }
  return r;
}

}  // namespace fuzz
