// The program representation: names, promotion, shape and dtype inference, text, dead code.
#include "program.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace fuzz {

const char* op_name(Op op) {
  switch (op) {
    case Op::Input:
      return "input";
    case Op::Param:
      return "param";
    case Op::Outer:
      return "outer";
    case Op::Full:
      return "full";
    case Op::Arange:
      return "arange";
    case Op::Rand:
      return "rand";
    case Op::Randn:
      return "randn";
    case Op::Unary:
      return "unary";
    case Op::Binary:
      return "binary";
    case Op::BinaryScalar:
      return "binary_scalar";
    case Op::Where:
      return "where";
    case Op::WhereScalar:
      return "where_scalar";
    case Op::Cast:
      return "astype";
    case Op::Reshape:
      return "reshape";
    case Op::Transpose:
      return "transpose";
    case Op::Permute:
      return "permute";
    case Op::BroadcastTo:
      return "broadcast_to";
    case Op::Slice:
      return "slice";
    case Op::Select:
      return "select";
    case Op::Unsqueeze:
      return "unsqueeze";
    case Op::Squeeze:
      return "squeeze";
    case Op::Concat:
      return "concat";
    case Op::Stack:
      return "stack";
    case Op::IndexSelect:
      return "index_select";
    case Op::IndexAdd:
      return "index_add";
    case Op::Sum:
      return "sum";
    case Op::Mean:
      return "mean";
    case Op::Amax:
      return "amax";
    case Op::Softmax:
      return "softmax";
    case Op::LogSoftmax:
      return "log_softmax";
    case Op::Matmul:
      return "matmul";
    case Op::Scan:
      return "scan";
    case Op::Fori:
      return "fori_loop";
    case Op::While:
      return "while_loop";
    case Op::Pure:
      return "assume_pure";
    case Op::Proj:
      return "result";
  }
  return "?";
}

std::string label(size_t i, Op op) {
  std::string s = "%";
  s += std::to_string(i);
  s += ' ';
  s += op_name(op);
  return s;
}

const char* unary_name(UK k) {
  static const char* names[] = {"neg",  "exp",  "log",  "log1p", "sin",   "cos", "tanh", "sigmoid",
                                "relu", "gelu", "silu", "sqrt",  "rsqrt", "abs", "erf"};
  return k < UK::kCount ? names[static_cast<int>(k)] : "?";
}

const char* binary_name(BK k) {
  static const char* names[] = {"add",   "sub", "mul", "div", "pow", "maximum", "minimum",
                                "atan2", "eq",  "ne",  "lt",  "le",  "gt",      "ge"};
  return k < BK::kCount ? names[static_cast<int>(k)] : "?";
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool is_multi(Op op) {
  return op == Op::Scan || op == Op::Fori || op == Op::While || op == Op::Pure;
}

bool is_leafish(Op op) {
  return op == Op::Input || op == Op::Full || op == Op::Arange || op == Op::Rand || op == Op::Randn;
}

namespace {

// 0: bool, 1: integer, 2: floating
int category(DType d) {
  return d == DType::bool_ ? 0 : floating(d) ? 2 : 1;
}

}  // namespace

DType promote(DType a, DType b) {
  if (a == b) return a;
  const int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return DType::int64;  // int32 with int64
  // floats: f16 with bf16 is f32; otherwise the wider
  auto rank = [](DType d) { return d == DType::float64 ? 3 : d == DType::float32 ? 2 : 1; };
  if (rank(a) == 1 && rank(b) == 1) return DType::float32;
  return rank(a) >= rank(b) ? a : b;
}

DType result_type(const std::vector<std::pair<DType, int>>& args) {
  // per level: the promoted type of that level's operands
  bool set[3] = {false, false, false};
  DType t[3] = {DType::bool_, DType::bool_, DType::bool_};
  for (auto [d, level] : args) {
    if (level == 2 && floating(d)) d = DType::float32;  // a plain float: the default dtype
    t[level] = set[level] ? promote(t[level], d) : d;
    set[level] = true;
  }
  // a lower level wins only when it brings a higher category
  auto combine = [](bool hs, DType h, bool ls, DType l, bool& os) {
    os = hs || ls;
    if (!hs) return l;
    if (!ls) return h;
    return category(l) > category(h) ? l : h;
  };
  bool s12 = false, s = false;
  DType low = combine(set[1], t[1], set[2], t[2], s12);
  return combine(set[0], t[0], s12, low, s);
}

namespace {

bool fail(std::string* why, const std::string& s) {
  if (why) *why = s;
  return false;
}

bool broadcast(const Dims& a, const Dims& b, Dims& out) {
  const size_t n = std::max(a.size(), b.size());
  out.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ia =
        static_cast<int64_t>(a.size()) - static_cast<int64_t>(n) + static_cast<int64_t>(i);
    const int64_t ib =
        static_cast<int64_t>(b.size()) - static_cast<int64_t>(n) + static_cast<int64_t>(i);
    const int64_t da = ia >= 0 ? a[static_cast<size_t>(ia)] : 1;
    const int64_t db = ib >= 0 ? b[static_cast<size_t>(ib)] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

// dim in [-nd, nd - 1] (a 0-d tensor: [-1, 0]); normalized into `out`
bool norm_dim(int64_t dim, int nd, int& out) {
  const int64_t lo = nd == 0 ? -1 : -nd, hi = nd == 0 ? 0 : nd - 1;
  if (dim < lo || dim > hi) return false;
  out = static_cast<int>(dim < 0 ? dim + (nd == 0 ? 1 : nd) : dim);
  return true;
}

int level(const Node& n) {
  return n.shape.empty() ? 1 : 0;
}

}  // namespace

bool infer_node(Program& p, size_t i, const Program* parent, std::string* why) {
  {
    Node& n = p.nodes[i];
    auto at = [&] {
      std::string s = "%";
      s += std::to_string(i);
      s += ' ';
      s += op_name(n.op);
      s += ": ";
      return s;
    };
    for (int x : n.in)
      if (x < 0 || static_cast<size_t>(x) >= i) return fail(why, at() + "bad operand index");
    for (int x : n.in)
      if (is_multi(p.nodes[static_cast<size_t>(x)].op) && n.op != Op::Proj)
        return fail(why, at() + "reads a multi-result node");
    auto A = [&](size_t k) -> Node& { return p.nodes[static_cast<size_t>(n.in[k])]; };
    const auto nin = n.in.size();
    auto need = [&](size_t k) { return nin == k; };
    switch (n.op) {
      case Op::Input:
        if (!n.data.empty() && static_cast<int64_t>(n.data.size()) != numel(n.shape))
          return fail(why, at() + "data size");
        break;
      case Op::Full:
        break;
      case Op::Rand:
      case Op::Randn:
        if (!floating(n.dtype)) return fail(why, at() + "random ops draw floats");
        break;
      case Op::Arange:
        if (n.ints.size() != 3 || n.ints[0] <= 0 || n.ints[2] <= 0 || n.dtype == DType::bool_)
          return fail(why, at() + "bad arange");
        n.shape = {n.ints[0]};
        break;
      case Op::Param: {
        const auto k = static_cast<size_t>(n.ints.at(0));
        if (k >= p.param_dtypes.size()) return fail(why, at() + "no such param");
        n.dtype = p.param_dtypes[k];
        n.shape = p.param_shapes[k];
        break;
      }
      case Op::Outer: {
        if (!parent) return fail(why, at() + "no enclosing program");
        const auto k = static_cast<size_t>(n.ints.at(0));
        if (k >= parent->nodes.size() || is_multi(parent->nodes[k].op))
          return fail(why, at() + "bad outer index");
        n.dtype = parent->nodes[k].dtype;
        n.shape = parent->nodes[k].shape;
        break;
      }
      case Op::Unary: {
        if (!need(1)) return fail(why, at() + "arity");
        const UK k = static_cast<UK>(n.kind);
        const bool signed_domain = k == UK::Neg || k == UK::Relu || k == UK::Abs;
        DType d = A(0).dtype;
        if (signed_domain && d == DType::bool_) return fail(why, at() + "bool input");
        if (!signed_domain && !floating(d)) d = DType::float32;
        n.dtype = d;
        n.shape = A(0).shape;
        break;
      }
      case Op::Binary:
      case Op::BinaryScalar: {
        const BK k = static_cast<BK>(n.kind);
        DType common;
        Dims shape;
        if (n.op == Op::Binary) {
          if (!need(2)) return fail(why, at() + "arity");
          common = result_type({{A(0).dtype, level(A(0))}, {A(1).dtype, level(A(1))}});
          if (!broadcast(A(0).shape, A(1).shape, shape)) return fail(why, at() + "broadcast");
        } else {
          if (!need(1)) return fail(why, at() + "arity");
          common = result_type({{A(0).dtype, level(A(0))}, {n.sdtype, 2}});
          shape = A(0).shape;
        }
        if (!is_compare(k) && common == DType::bool_ && (k == BK::Sub || k == BK::Pow))
          return fail(why, at() + "bool sub/pow");
        if ((k == BK::Div || k == BK::Atan2) && !floating(common)) common = DType::float32;
        n.dtype = is_compare(k) ? DType::bool_ : common;
        n.shape = shape;
        break;
      }
      case Op::Where:
      case Op::WhereScalar: {
        if (!need(n.op == Op::Where ? 3 : 2)) return fail(why, at() + "arity");
        if (A(0).dtype != DType::bool_) return fail(why, at() + "condition not bool");
        Dims s;
        if (!broadcast(A(0).shape, A(1).shape, s)) return fail(why, at() + "broadcast");
        if (n.op == Op::Where) {
          Dims s2;
          if (!broadcast(s, A(2).shape, s2)) return fail(why, at() + "broadcast");
          s = s2;
          n.dtype = result_type({{A(1).dtype, level(A(1))}, {A(2).dtype, level(A(2))}});
        } else {
          n.dtype = result_type({{A(1).dtype, level(A(1))}, {n.sdtype, 2}});
        }
        n.shape = s;
        break;
      }
      case Op::Cast:
        if (!need(1)) return fail(why, at() + "arity");
        n.shape = A(0).shape;
        break;
      case Op::Reshape: {
        if (!need(1)) return fail(why, at() + "arity");
        if (numel(n.shape) != numel(A(0).shape)) return fail(why, at() + "numel differs");
        if (n.ints.empty() || n.ints[0] >= static_cast<int64_t>(n.shape.size()))
          return fail(why, at() + "bad -1 dim");
        if (n.ints[0] >= 0 && n.shape[static_cast<size_t>(n.ints[0])] == 0)
          return fail(why, at() + "-1 for a 0 dim");
        n.dtype = A(0).dtype;
        break;
      }
      case Op::Transpose: {
        if (!need(1) || n.ints.size() != 2) return fail(why, at() + "arity");
        const int nd = static_cast<int>(A(0).shape.size());
        n.dtype = A(0).dtype;
        n.shape = A(0).shape;
        if (nd < 2 && n.ints[0] == -2 && n.ints[1] == -1) break;
        int d0, d1;
        if (nd == 0 || !norm_dim(n.ints[0], nd, d0) || !norm_dim(n.ints[1], nd, d1))
          return fail(why, at() + "dims");
        std::swap(n.shape[static_cast<size_t>(d0)], n.shape[static_cast<size_t>(d1)]);
        break;
      }
      case Op::Permute: {
        if (!need(1)) return fail(why, at() + "arity");
        const int nd = static_cast<int>(A(0).shape.size());
        if (static_cast<int>(n.ints.size()) != nd) return fail(why, at() + "perm size");
        std::vector<char> seen(static_cast<size_t>(nd), 0);
        Dims s(static_cast<size_t>(nd));
        for (int j = 0; j < nd; ++j) {
          int d;
          if (!norm_dim(n.ints[static_cast<size_t>(j)], nd, d) || seen[static_cast<size_t>(d)])
            return fail(why, at() + "perm");
          seen[static_cast<size_t>(d)] = 1;
          s[static_cast<size_t>(j)] = A(0).shape[static_cast<size_t>(d)];
        }
        n.dtype = A(0).dtype;
        n.shape = s;
        break;
      }
      case Op::BroadcastTo: {
        if (!need(1)) return fail(why, at() + "arity");
        const Dims& from = A(0).shape;
        if (from.size() > n.shape.size()) return fail(why, at() + "rank");
        const size_t off = n.shape.size() - from.size();
        for (size_t j = 0; j < from.size(); ++j)
          if (from[j] != 1 && from[j] != n.shape[off + j]) return fail(why, at() + "dims");
        n.dtype = A(0).dtype;
        break;
      }
      case Op::Slice: {
        if (!need(1) || n.ints.size() != 4) return fail(why, at() + "arity");
        const int nd = static_cast<int>(A(0).shape.size());
        int d;
        if (nd == 0 || !norm_dim(n.ints[0], nd, d) || n.ints[3] <= 0)
          return fail(why, at() + "dims");
        const int64_t sz = A(0).shape[static_cast<size_t>(d)];
        int64_t start = n.ints[1], stop = n.ints[2];
        if (start < 0) start += sz;
        if (stop < 0) stop += sz;
        start = std::clamp<int64_t>(start, 0, sz);
        stop = std::clamp<int64_t>(stop, start, sz);
        n.dtype = A(0).dtype;
        n.shape = A(0).shape;
        n.shape[static_cast<size_t>(d)] = stop == start ? 0 : 1 + (stop - start - 1) / n.ints[3];
        break;
      }
      case Op::Select: {
        if (!need(1) || n.ints.size() != 2) return fail(why, at() + "arity");
        const int nd = static_cast<int>(A(0).shape.size());
        int d;
        if (nd == 0 || !norm_dim(n.ints[0], nd, d)) return fail(why, at() + "dims");
        const int64_t sz = A(0).shape[static_cast<size_t>(d)];
        if (n.ints[1] < -sz || n.ints[1] >= sz) return fail(why, at() + "index");
        n.dtype = A(0).dtype;
        n.shape = A(0).shape;
        n.shape.erase(n.shape.begin() + d);
        break;
      }
      case Op::Unsqueeze: {
        if (!need(1) || n.ints.size() != 1) return fail(why, at() + "arity");
        const int nd = static_cast<int>(A(0).shape.size());
        int d;
        if (!norm_dim(n.ints[0], nd + 1, d)) return fail(why, at() + "dim");
        n.dtype = A(0).dtype;
        n.shape = A(0).shape;
        n.shape.insert(n.shape.begin() + d, 1);
        break;
      }
      case Op::Squeeze: {
        if (!need(1) || n.ints.size() != 1) return fail(why, at() + "arity");
        const int nd = static_cast<int>(A(0).shape.size());
        int d;
        if (!norm_dim(n.ints[0], nd, d) || nd == 0 || A(0).shape[static_cast<size_t>(d)] != 1)
          return fail(why, at() + "dim");
        n.dtype = A(0).dtype;
        n.shape = A(0).shape;
        n.shape.erase(n.shape.begin() + d);
        break;
      }
      case Op::Concat:
      case Op::Stack: {
        if (nin < 1 || n.ints.size() != 1) return fail(why, at() + "arity");
        const Dims& first = A(0).shape;
        const int nd = static_cast<int>(first.size());
        DType d = A(0).dtype;
        for (size_t j = 1; j < nin; ++j) d = promote(d, A(j).dtype);
        int dim;
        if (n.op == Op::Stack) {
          for (size_t j = 0; j < nin; ++j)
            if (A(j).shape != first) return fail(why, at() + "shapes differ");
          if (!norm_dim(n.ints[0], nd + 1, dim)) return fail(why, at() + "dim");
          n.shape = first;
          n.shape.insert(n.shape.begin() + dim, static_cast<int64_t>(nin));
        } else {
          if (nd == 0 || !norm_dim(n.ints[0], nd, dim)) return fail(why, at() + "dim");
          int64_t total = 0;
          for (size_t j = 0; j < nin; ++j) {
            const Dims& s = A(j).shape;
            if (static_cast<int>(s.size()) != nd) return fail(why, at() + "ranks differ");
            for (int q = 0; q < nd; ++q)
              if (q != dim && s[static_cast<size_t>(q)] != first[static_cast<size_t>(q)])
                return fail(why, at() + "dims differ");
            total += s[static_cast<size_t>(dim)];
          }
          n.shape = first;
          n.shape[static_cast<size_t>(dim)] = total;
        }
        n.dtype = d;
        break;
      }
      case Op::IndexSelect:
      case Op::IndexAdd: {
        const bool add = n.op == Op::IndexAdd;
        if (!need(add ? 3 : 2) || n.ints.size() != 1) return fail(why, at() + "arity");
        const Node& idx = A(1);
        if ((idx.dtype != DType::int32 && idx.dtype != DType::int64) || idx.shape.size() != 1)
          return fail(why, at() + "index");
        const int nd = static_cast<int>(A(0).shape.size());
        int d;
        if (nd == 0 || !norm_dim(n.ints[0], nd, d)) return fail(why, at() + "dim");
        if (A(0).shape[static_cast<size_t>(d)] == 0) return fail(why, at() + "empty dim");
        Dims s = A(0).shape;
        s[static_cast<size_t>(d)] = idx.shape[0];
        if (add) {
          if (A(0).dtype == DType::bool_) return fail(why, at() + "bool");
          if (A(2).shape != s) return fail(why, at() + "source shape");
          n.shape = A(0).shape;
        } else {
          n.shape = s;
        }
        n.dtype = A(0).dtype;
        break;
      }
      case Op::Sum:
      case Op::Mean:
      case Op::Amax: {
        if (!need(1) || n.ints.size() < 2) return fail(why, at() + "arity");
        const Dims& in = A(0).shape;
        const int nd = static_cast<int>(in.size());
        std::vector<int> dims;
        if (n.ints[0]) {
          for (int j = 0; j < nd; ++j) dims.push_back(j);
        } else {
          if (n.ints.size() < 3) return fail(why, at() + "no dims");
          for (size_t j = 2; j < n.ints.size(); ++j) {
            int d;
            if (!norm_dim(n.ints[j], nd, d)) return fail(why, at() + "dim");
            dims.push_back(d);
          }
          std::sort(dims.begin(), dims.end());
          if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
            return fail(why, at() + "repeated dim");
          if (nd == 0) dims.clear();
        }
        Dims out;
        for (int j = 0; j < nd; ++j) {
          const bool red = std::find(dims.begin(), dims.end(), j) != dims.end();
          if (red && n.op == Op::Amax && in[static_cast<size_t>(j)] == 0)
            return fail(why, at() + "amax of nothing");
          if (!red)
            out.push_back(in[static_cast<size_t>(j)]);
          else if (n.ints[1])
            out.push_back(1);
        }
        DType d = A(0).dtype;
        if (n.op == Op::Sum && !floating(d)) d = DType::int64;
        if (n.op == Op::Mean && !floating(d)) return fail(why, at() + "mean of integers");
        n.dtype = d;
        n.shape = out;
        break;
      }
      case Op::Softmax:
      case Op::LogSoftmax: {
        if (!need(1) || n.ints.size() != 1) return fail(why, at() + "arity");
        if (!floating(A(0).dtype)) return fail(why, at() + "not floating");
        int d;
        if (!norm_dim(n.ints[0], static_cast<int>(A(0).shape.size()), d))
          return fail(why, at() + "dim");
        n.dtype = A(0).dtype;
        n.shape = A(0).shape;
        break;
      }
      case Op::Matmul: {
        if (!need(2)) return fail(why, at() + "arity");
        const Dims &a = A(0).shape, &b = A(1).shape;
        if (a.empty() || b.empty()) return fail(why, at() + "0-d");
        const int64_t ka = a.back(), kb = b.size() == 1 ? b[0] : b[b.size() - 2];
        if (ka != kb) return fail(why, at() + "not aligned");
        Dims ba(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
        Dims bb(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
        Dims out;
        if (!broadcast(ba, bb, out)) return fail(why, at() + "batch broadcast");
        if (a.size() >= 2) out.push_back(a[a.size() - 2]);
        if (b.size() >= 2) out.push_back(b.back());
        const DType d = result_type({{A(0).dtype, 0}, {A(1).dtype, 0}});
        if (d == DType::bool_) return fail(why, at() + "bool matmul");
        n.dtype = d;
        n.shape = out;
        break;
      }
      case Op::Scan:
      case Op::Fori:
      case Op::While:
      case Op::Pure: {
        if (n.bodies.size() != 1) return fail(why, at() + "no body");
        Program& body = n.bodies[0];
        std::vector<DType> pd;
        std::vector<Dims> ps;
        size_t first_carry = 0, nc = nin;
        if (n.op == Op::Scan) {
          nc = static_cast<size_t>(n.ints.at(0));
          if (nc > nin || nc == nin) return fail(why, at() + "scan needs xs");
          const int64_t len = A(nc).shape.empty() ? -1 : A(nc).shape[0];
          for (size_t j = 0; j < nc; ++j) {
            pd.push_back(A(j).dtype);
            ps.push_back(A(j).shape);
          }
          for (size_t j = nc; j < nin; ++j) {
            if (A(j).shape.empty() || A(j).shape[0] != len) return fail(why, at() + "xs lengths");
            pd.push_back(A(j).dtype);
            ps.push_back(Dims(A(j).shape.begin() + 1, A(j).shape.end()));
          }
        } else if (n.op == Op::Fori) {
          if (n.ints.size() != 3) return fail(why, at() + "attrs");
          if (n.ints[2]) {
            if (nin < 2) return fail(why, at() + "bounds");
            for (size_t j = 0; j < 2; ++j)
              if (A(j).dtype != DType::int64 || numel(A(j).shape) != 1)
                return fail(why, at() + "bounds must be int64 scalars");
            first_carry = 2;
          }
          nc = nin - first_carry;
          pd.push_back(DType::int64);
          ps.push_back({});
          for (size_t j = first_carry; j < nin; ++j) {
            pd.push_back(A(j).dtype);
            ps.push_back(A(j).shape);
          }
        } else {
          for (size_t j = 0; j < nin; ++j) {
            pd.push_back(A(j).dtype);
            ps.push_back(A(j).shape);
          }
        }
        body.param_dtypes = pd;
        body.param_shapes = ps;
        std::string bwhy;
        if (!infer(body, &p, &bwhy)) return fail(why, at() + "body: " + bwhy);
        for (int o : body.outputs)
          if (o < 0 || static_cast<size_t>(o) >= body.nodes.size() ||
              is_multi(body.nodes[static_cast<size_t>(o)].op))
            return fail(why, at() + "bad body output");
        auto out = [&](size_t k) -> const Node& {
          return body.nodes[static_cast<size_t>(body.outputs[k])];
        };
        n.rdtypes.clear();
        n.rshapes.clear();
        if (n.op != Op::Pure) {
          const size_t need_out = n.op == Op::While ? nc + 1 : nc;
          if (body.outputs.size() < need_out) return fail(why, at() + "body outputs");
          if (n.op != Op::Scan && body.outputs.size() != need_out)
            return fail(why, at() + "body outputs");
          for (size_t j = 0; j < nc; ++j) {
            const Node& c = A(first_carry + j);
            if (out(j).dtype != c.dtype || out(j).shape != c.shape)
              return fail(why, at() + "a carry changes type");
            n.rdtypes.push_back(c.dtype);
            n.rshapes.push_back(c.shape);
          }
          if (n.op == Op::While) {
            const Node& c = out(nc);
            if (c.dtype != DType::bool_ || numel(c.shape) != 1)
              return fail(why, at() + "condition not a bool scalar");
          }
          if (n.op == Op::Scan)
            for (size_t j = nc; j < body.outputs.size(); ++j) {
              Dims s = out(j).shape;
              s.insert(s.begin(), A(nc).shape[0]);
              n.rdtypes.push_back(out(j).dtype);
              n.rshapes.push_back(s);
            }
        } else {
          if (body.outputs.empty()) return fail(why, at() + "no outputs");
          for (size_t j = 0; j < body.outputs.size(); ++j) {
            n.rdtypes.push_back(out(j).dtype);
            n.rshapes.push_back(out(j).shape);
          }
        }
        break;
      }
      case Op::Proj: {
        if (!need(1) || n.ints.size() != 1) return fail(why, at() + "arity");
        const Node& m = A(0);
        if (!is_multi(m.op)) return fail(why, at() + "not a multi-result node");
        const auto k = static_cast<size_t>(n.ints[0]);
        if (k >= m.rdtypes.size()) return fail(why, at() + "no such result");
        n.dtype = m.rdtypes[k];
        n.shape = m.rshapes[k];
        break;
      }
    }
    if (!is_multi(n.op))
      for (int64_t d : n.shape)
        if (d < 0) return fail(why, at() + "negative dim");
  }
  return true;
}

bool infer(Program& p, const Program* parent, std::string* why) {
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (!infer_node(p, i, parent, why)) return false;
  for (int o : p.outputs)
    if (o < 0 || static_cast<size_t>(o) >= p.nodes.size() ||
        is_multi(p.nodes[static_cast<size_t>(o)].op))
      return fail(why, "bad output");
  return true;
}

namespace {

std::string num(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

}  // namespace

std::string to_text(const Program& p, int indent) {
  std::ostringstream o;
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (!p.param_dtypes.empty()) {
    o << pad << "params:";
    for (size_t i = 0; i < p.param_dtypes.size(); ++i)
      o << " " << lazytrace::dtype_short(p.param_dtypes[i]) << dims_str(p.param_shapes[i]);
    o << "\n";
  }
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& n = p.nodes[i];
    o << pad << "%" << i << " = ";
    switch (n.op) {
      case Op::Unary:
        o << unary_name(static_cast<UK>(n.kind));
        break;
      case Op::Binary:
        o << binary_name(static_cast<BK>(n.kind));
        break;
      case Op::BinaryScalar:
        o << binary_name(static_cast<BK>(n.kind)) << "_scalar";
        break;
      case Op::Input:
      case Op::Param:
      case Op::Outer:
      case Op::Full:
      case Op::Arange:
      case Op::Rand:
      case Op::Randn:
      case Op::Where:
      case Op::WhereScalar:
      case Op::Cast:
      case Op::Reshape:
      case Op::Transpose:
      case Op::Permute:
      case Op::BroadcastTo:
      case Op::Slice:
      case Op::Select:
      case Op::Unsqueeze:
      case Op::Squeeze:
      case Op::Concat:
      case Op::Stack:
      case Op::IndexSelect:
      case Op::IndexAdd:
      case Op::Sum:
      case Op::Mean:
      case Op::Amax:
      case Op::Softmax:
      case Op::LogSoftmax:
      case Op::Matmul:
      case Op::Scan:
      case Op::Fori:
      case Op::While:
      case Op::Pure:
      case Op::Proj:
        o << op_name(n.op);
    }
    o << "(";
    bool first = true;
    for (int x : n.in) {
      o << (first ? "" : ", ") << "%" << x;
      first = false;
    }
    if (!n.ints.empty()) {
      o << (first ? "" : ", ") << "ints=" << dims_str(n.ints);
      first = false;
    }
    if (n.op == Op::BinaryScalar || n.op == Op::WhereScalar || n.op == Op::Full ||
        (n.op == Op::Input && n.data.empty()) ||
        (n.op == Op::Pure && n.ints.size() > 1 && n.ints[1]))
      o << (first ? "" : ", ") << "f=" << num(n.f)
        << (n.op == Op::BinaryScalar || n.op == Op::WhereScalar
                ? std::string(" (") + lazytrace::dtype_short(n.sdtype) + ")"
                : "");
    if (n.op == Op::Input && !n.data.empty())
      o << (first ? "" : ", ") << "data[" << n.data.size() << "]";
    o << ")";
    if (is_multi(n.op)) {
      o << " -> (";
      for (size_t k = 0; k < n.rdtypes.size(); ++k)
        o << (k ? ", " : "") << lazytrace::dtype_short(n.rdtypes[k]) << dims_str(n.rshapes[k]);
      o << ")";
    } else {
      o << " : " << lazytrace::dtype_short(n.dtype) << dims_str(n.shape);
    }
    if (n.materialize) o << " (synced early)";
    o << "\n";
    for (const Program& b : n.bodies) {
      o << to_text(b, indent + 4);
      o << pad << "    outputs:";
      for (int x : b.outputs) o << " %" << x;
      o << "\n";
    }
  }
  if (indent == 0) {
    o << "outputs:";
    for (int x : p.outputs) o << " %" << x;
    o << "\n";
  }
  return o.str();
}

namespace {

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

void serialize_into(const Program& p, std::ostringstream& o) {
  o << "program " << p.param_dtypes.size() << "\n";
  for (size_t i = 0; i < p.param_dtypes.size(); ++i) {
    o << "param " << static_cast<int>(p.param_dtypes[i]) << " " << p.param_shapes[i].size();
    for (int64_t d : p.param_shapes[i]) o << " " << d;
    o << "\n";
  }
  o << "nodes " << p.nodes.size() << "\n";
  for (const Node& n : p.nodes) {
    o << "node " << static_cast<int>(n.op) << " " << static_cast<int>(n.kind) << " "
      << static_cast<int>(n.dtype) << " " << static_cast<int>(n.sdtype) << " " << hex(n.f) << " "
      << (n.materialize ? 1 : 0) << " " << n.in.size();
    for (int x : n.in) o << " " << x;
    o << " " << n.ints.size();
    for (int64_t x : n.ints) o << " " << x;
    o << " " << n.shape.size();
    for (int64_t x : n.shape) o << " " << x;
    o << " " << n.data.size();
    for (double x : n.data) o << " " << hex(x);
    o << " " << n.bodies.size() << "\n";
    for (const Program& b : n.bodies) serialize_into(b, o);
  }
  o << "outputs " << p.outputs.size();
  for (int x : p.outputs) o << " " << x;
  o << "\n";
}

bool parse_from(std::istringstream& in, Program& p) {
  std::string word;
  size_t np = 0, nn = 0;
  if (!(in >> word >> np) || word != "program") return false;
  for (size_t i = 0; i < np; ++i) {
    int d;
    size_t nd;
    if (!(in >> word >> d >> nd) || word != "param") return false;
    Dims s(nd);
    for (int64_t& x : s) in >> x;
    p.param_dtypes.push_back(static_cast<DType>(d));
    p.param_shapes.push_back(s);
  }
  if (!(in >> word >> nn) || word != "nodes") return false;
  for (size_t i = 0; i < nn; ++i) {
    Node n;
    int op, kind, dt, sdt, mat;
    std::string f;
    size_t k;
    if (!(in >> word >> op >> kind >> dt >> sdt >> f >> mat) || word != "node") return false;
    n.op = static_cast<Op>(op);
    n.kind = static_cast<uint8_t>(kind);
    n.dtype = static_cast<DType>(dt);
    n.sdtype = static_cast<DType>(sdt);
    n.f = std::strtod(f.c_str(), nullptr);
    n.materialize = mat != 0;
    in >> k;
    n.in.resize(k);
    for (int& x : n.in) in >> x;
    in >> k;
    n.ints.resize(k);
    for (int64_t& x : n.ints) in >> x;
    in >> k;
    n.shape.resize(k);
    for (int64_t& x : n.shape) in >> x;
    in >> k;
    n.data.resize(k);
    for (double& x : n.data) {
      in >> f;
      x = std::strtod(f.c_str(), nullptr);
    }
    in >> k;
    for (size_t b = 0; b < k; ++b) {
      n.bodies.emplace_back();
      if (!parse_from(in, n.bodies.back())) return false;
    }
    if (!in) return false;
    p.nodes.push_back(std::move(n));
  }
  size_t no;
  if (!(in >> word >> no) || word != "outputs") return false;
  p.outputs.resize(no);
  for (int& x : p.outputs) in >> x;
  return static_cast<bool>(in);
}

}  // namespace

std::string serialize(const Program& p) {
  std::ostringstream o;
  serialize_into(p, o);
  return o.str();
}

bool parse(const std::string& text, Program& p, std::string* why) {
  std::istringstream in(text);
  p = Program();
  if (!parse_from(in, p)) {
    if (why) *why = "malformed program text";
    return false;
  }
  return infer(p, nullptr, why);
}

namespace {

// Marks the parent nodes a body reads (its Outer nodes), after dead-coding the body.
void outer_reads(Program& body, std::vector<char>& live) {
  dead_code(body);
  for (const Node& n : body.nodes)
    if (n.op == Op::Outer) live[static_cast<size_t>(n.ints[0])] = 1;
}

void remap_outer(Program& body, const std::vector<int>& map) {
  for (Node& n : body.nodes)
    if (n.op == Op::Outer) n.ints[0] = map[static_cast<size_t>(n.ints[0])];
}

}  // namespace

void dead_code(Program& p) {
  std::vector<char> live(p.nodes.size(), 0);
  for (int o : p.outputs) live[static_cast<size_t>(o)] = 1;
  for (size_t i = p.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    Node& n = p.nodes[i];
    for (int x : n.in) live[static_cast<size_t>(x)] = 1;
    for (Program& b : n.bodies) outer_reads(b, live);
  }
  std::vector<int> map(p.nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (live[i]) {
      map[i] = static_cast<int>(kept.size());
      kept.push_back(std::move(p.nodes[i]));
    }
  for (Node& n : kept) {
    for (int& x : n.in) x = map[static_cast<size_t>(x)];
    for (Program& b : n.bodies) remap_outer(b, map);
  }
  for (int& o : p.outputs) o = map[static_cast<size_t>(o)];
  p.nodes = std::move(kept);
}

int count_nodes(const Program& p) {
  int c = 0;
  for (const Node& n : p.nodes) {
    ++c;
    for (const Program& b : n.bodies) c += count_nodes(b);
  }
  return c;
}

}  // namespace fuzz
