// The regression writer (see regression.h).
#include "regression.h"

#include <lazytrace/lazytrace.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "executor.h"
#include "reference.h"

namespace fuzz {
namespace {

std::string num(double v) {
  if (v == std::trunc(v) && std::abs(v) < 1e15) {
    std::ostringstream o;
    o << static_cast<long long>(v) << ".0";
    return o.str();
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string dtype_cpp(DType d) {  // the constant's name: lt::bool_ for "bool"
  return d == DType::bool_ ? "lt::bool_" : std::string("lt::") + lazytrace::dtype_name(d);
}

std::string shape_cpp(const Dims& d) {
  std::string s = "lt::Shape{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

std::string list(const std::vector<double>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    s += (i ? ", " : "") + num(v[i]);
    if (i % 8 == 7 && i + 1 < v.size()) s += "\n     ";
  }
  return s + "}";
}

bool perturbable(const Node& n) {
  const bool lit = n.f != 0 && n.f != 1 && n.f != -1;
  if (!lit) return false;
  if (n.op == Op::BinaryScalar)
    return n.sdtype == DType::float32 && !(n.ints.size() > 1 && n.ints[1]) &&
           static_cast<BK>(n.kind) != BK::Pow;
  if (n.op == Op::WhereScalar) return n.sdtype == DType::float32;
  if (n.op == Op::Full) return lazytrace::is_floating(n.dtype);
  return false;
}

// Emits a program as C++; the inputs and the literals it reads are numbered in emission order.
class Emitter {
 public:
  std::vector<const Node*> inputs;    // in[k]
  std::vector<const Node*> literals;  // lit[k]
  bool grad = false;                  // top-level float inputs require grad (into `leaves`)

  std::string program(const Program& p, int depth, const std::function<std::string(int)>& param,
                      const std::function<std::string(int)>& outer, const std::string& static_name,
                      const std::string& pad) {
    std::ostringstream o;
    std::map<int64_t, std::string> groups;
    auto V = [&](int i) { return var(depth, i); };
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      const Node& n = p.nodes[i];
      auto A = [&](size_t k) { return V(n.in[k]); };
      const std::string v = V(static_cast<int>(i));
      auto scalar = [&](double f, DType kind) -> std::string {
        if (kind == DType::bool_)
          return std::string("lt::Scalar(") + (f != 0 ? "true" : "false") + ")";
        if (kind == DType::int64)
          return "lt::Scalar(" + std::to_string(static_cast<long long>(f)) + "LL)";
        return "lt::Scalar(" + num(f) + ")";
      };
      auto lit = [&](double f, DType kind) -> std::string {
        if (perturbable(n)) {
          literals.push_back(&n);
          return "lt::Scalar(lit[" + std::to_string(literals.size() - 1) + "])";
        }
        return scalar(f, kind);
      };
      std::string e;
      switch (n.op) {
        case Op::Input: {
          inputs.push_back(&n);
          const bool rg =
              grad && depth == 0 && (n.dtype == DType::float32 || n.dtype == DType::float64);
          e = "fuzzreg::input(" + dtype_cpp(n.dtype) + ", " + shape_cpp(n.shape) + ", in[" +
              std::to_string(inputs.size() - 1) + "]" + (rg ? ", true)" : ")");
          if (rg) {
            o << pad << "Tensor " << v << " = " << e << ";\n"
              << pad << "leaves->push_back(" << v << ");\n";
            continue;
          }
          break;
        }
        case Op::Param:
          e = param(static_cast<int>(n.ints[0]));
          break;
        case Op::Outer:
          e = outer(static_cast<int>(n.ints[0]));
          break;
        case Op::Full:
          e = "lt::full(" + shape_cpp(n.shape) + ", " +
              lit(n.f, lazytrace::is_floating(n.dtype) ? DType::float32 : n.dtype) + ", " +
              dtype_cpp(n.dtype) + ")";
          break;
        case Op::Arange: {
          const double start = static_cast<double>(n.ints[1]),
                       step = static_cast<double>(n.ints[2]);
          e = "lt::arange(" + num(start) + ", " +
              num(start + static_cast<double>(n.ints[0]) * step) + ", " + num(step) + ", " +
              dtype_cpp(n.dtype) + ")";
          break;
        }
        case Op::Rand:
          e = "lt::rand(" + shape_cpp(n.shape) + ", " + dtype_cpp(n.dtype) + ")";
          break;
        case Op::Randn:
          e = "lt::randn(" + shape_cpp(n.shape) + ", " + dtype_cpp(n.dtype) + ")";
          break;
        case Op::Unary:
          e = std::string("lt::") + unary_name(static_cast<UK>(n.kind)) + "(" + A(0) + ")";
          break;
        case Op::Binary:
          e = std::string("lt::") + binary_name(static_cast<BK>(n.kind)) + "(" + A(0) + ", " +
              A(1) + ")";
          break;
        case Op::BinaryScalar: {
          const bool st = n.ints.size() > 1 && n.ints[1];
          const std::string s = st ? "lt::Scalar(" + static_name + ")" : lit(n.f, n.sdtype);
          const BK k = static_cast<BK>(n.kind);
          const bool left = n.ints[0] != 0;
          if (k == BK::Pow) {
            e = left ? "lt::pow(" + s + ", " + A(0) + ")" : "lt::pow(" + A(0) + ", " + s + ")";
            break;
          }
          const char* ops[] = {"+", "-",  "*",  "/", "",   "",  "",
                               "",  "==", "!=", "<", "<=", ">", ">="};
          const std::string op = ops[static_cast<int>(k)];
          e = left ? "(" + s + " " + op + " " + A(0) + ")" : "(" + A(0) + " " + op + " " + s + ")";
          break;
        }
        case Op::Where:
          e = "lt::where(" + A(0) + ", " + A(1) + ", " + A(2) + ")";
          break;
        case Op::WhereScalar: {
          const std::string s = lit(n.f, n.sdtype);
          e = n.ints[0] ? "lt::where(" + A(0) + ", " + s + ", " + A(1) + ")"
                        : "lt::where(" + A(0) + ", " + A(1) + ", " + s + ")";
          break;
        }
        case Op::Cast:
          e = "lt::astype(" + A(0) + ", " + dtype_cpp(n.dtype) + ")";
          break;
        case Op::Reshape: {
          Dims t = n.shape;
          if (n.ints[0] >= 0) t[static_cast<size_t>(n.ints[0])] = -1;
          e = "lt::reshape(" + A(0) + ", " + shape_cpp(t) + ")";
          break;
        }
        case Op::Transpose:
          e = "lt::transpose(" + A(0) + ", " + std::to_string(n.ints[0]) + ", " +
              std::to_string(n.ints[1]) + ")";
          break;
        case Op::Permute:
          e = "lt::permute(" + A(0) + ", " + ints(n.ints, 0) + ")";
          break;
        case Op::BroadcastTo:
          e = "lt::broadcast_to(" + A(0) + ", " + shape_cpp(n.shape) + ")";
          break;
        case Op::Slice:
          e = "lt::slice(" + A(0) + ", " + std::to_string(n.ints[0]) + ", " +
              std::to_string(n.ints[1]) + ", " + std::to_string(n.ints[2]) + ", " +
              std::to_string(n.ints[3]) + ")";
          break;
        case Op::Select:
          e = "lt::select(" + A(0) + ", " + std::to_string(n.ints[0]) + ", " +
              std::to_string(n.ints[1]) + ")";
          break;
        case Op::Unsqueeze:
          e = "lt::unsqueeze(" + A(0) + ", " + std::to_string(n.ints[0]) + ")";
          break;
        case Op::Squeeze:
          e = "lt::squeeze(" + A(0) + ", " + std::to_string(n.ints[0]) + ")";
          break;
        case Op::Concat:
        case Op::Stack: {
          std::string parts;
          for (size_t k = 0; k < n.in.size(); ++k) parts += (k ? ", " : "") + A(k);
          e = std::string(n.op == Op::Concat ? "lt::concat" : "lt::stack") + "(TV{" + parts +
              "}, " + std::to_string(n.ints[0]) + ")";
          break;
        }
        case Op::IndexSelect:
          e = "lt::index_select(" + A(0) + ", " + std::to_string(n.ints[0]) + ", " + A(1) + ")";
          break;
        case Op::IndexAdd:
          e = "lt::index_add(" + A(0) + ", " + std::to_string(n.ints[0]) + ", " + A(1) + ", " +
              A(2) + ")";
          break;
        case Op::Sum:
        case Op::Mean:
        case Op::Amax: {
          const std::string f = n.op == Op::Sum    ? "lt::sum"
                                : n.op == Op::Mean ? "lt::mean"
                                                   : "lt::amax";
          const bool keep = n.ints[1] != 0;
          if (n.ints[0] && !keep) {
            e = f + "(" + A(0) + ")";
          } else {
            std::vector<int64_t> dims;
            if (n.ints[0]) {
              const Node& x = p.nodes[static_cast<size_t>(n.in[0])];
              for (size_t d = 0; d < x.shape.size(); ++d) dims.push_back(static_cast<int64_t>(d));
            } else {
              dims.assign(n.ints.begin() + 2, n.ints.end());
            }
            e = f + "(" + A(0) + ", " + ints(dims, 0) + ", " + (keep ? "true" : "false") + ")";
          }
          break;
        }
        case Op::Softmax:
          e = "lt::softmax(" + A(0) + ", " + std::to_string(n.ints[0]) + ")";
          break;
        case Op::LogSoftmax:
          e = "lt::log_softmax(" + A(0) + ", " + std::to_string(n.ints[0]) + ")";
          break;
        case Op::Matmul:
          e = "lt::matmul(" + A(0) + ", " + A(1) + ")";
          break;
        case Op::Scan:
        case Op::Fori:
        case Op::While:
        case Op::Pure: {
          o << loop(p, n, static_cast<int>(i), depth, groups, pad, V);
          continue;
        }
        case Op::Proj:
          e = res(depth, n.in[0]) + "[" + std::to_string(n.ints[0]) + "]";
          break;
      }
      o << pad << "Tensor " << v << " = " << e << ";\n";
      if (n.materialize && depth == 0) o << pad << "lt::sync({" << v << "});\n";
    }
    return o.str();
  }

 private:
  static std::string var(int depth, int i) {
    return depth == 0 ? "v" + std::to_string(i)
                      : "b" + std::to_string(depth) + "_" + std::to_string(i);
  }
  static std::string res(int depth, int i) {
    return "r" + std::to_string(depth) + "_" + std::to_string(i);
  }
  static std::string ints(const std::vector<int64_t>& v, size_t from) {
    std::string s = "{";
    for (size_t i = from; i < v.size(); ++i) s += (i > from ? ", " : "") + std::to_string(v[i]);
    return s + "}";
  }

  std::string loop(const Program&, const Node& n, int i, int depth,
                   std::map<int64_t, std::string>& groups, const std::string& pad,
                   const std::function<std::string(int)>& V) {
    std::ostringstream o;
    const int bd = depth + 1;
    const std::string r = res(depth, i), in_pad = pad + "  ";
    auto args = [&](size_t from, size_t to) {
      std::string s = "TV{";
      for (size_t k = from; k < to; ++k) s += (k > from ? ", " : "") + V(n.in[k]);
      return s + "}";
    };
    auto outs = [&](const Program& b, size_t from, size_t to) {
      std::string s = "TV{";
      for (size_t k = from; k < to; ++k) s += (k > from ? ", " : "") + var(bd, b.outputs[k]);
      return s + "}";
    };
    const Program& b = n.bodies[0];
    auto P = [&](int k) { return "p" + std::to_string(bd) + "[" + std::to_string(k) + "]"; };
    auto body_code = [&](const std::string& st) {
      return in_pad + "(void)p" + std::to_string(bd) + ";\n" + program(b, bd, P, V, st, in_pad);
    };
    if (n.op == Op::Pure) {
      auto it = groups.find(n.ints[0]);
      std::string fn;
      if (it == groups.end()) {
        fn = "pure" + std::to_string(depth) + "_" + std::to_string(n.ints[0]);
        groups[n.ints[0]] = fn;
        o << pad << "auto " << fn << " = lt::assume_pure([&](const TV& p" << bd << ", double s"
          << bd << ") -> TV {\n"
          << in_pad << "(void)p" << bd << ";\n"
          << in_pad << "(void)s" << bd << ";\n"
          << body_code("s" + std::to_string(bd)) << in_pad << "return "
          << outs(b, 0, b.outputs.size()) << ";\n"
          << pad << "});\n";
      } else {
        fn = it->second;
      }
      o << pad << "TV " << r << " = " << fn << "(" << args(0, n.in.size()) << ", " << num(n.f)
        << ");\n";
      return o.str();
    }
    if (n.op == Op::Scan) {
      const auto nc = static_cast<size_t>(n.ints[0]);
      o << pad << "auto " << r << "_s = lt::scan([&](const TV& c" << bd << ", const TV& x" << bd
        << ") {\n"
        << in_pad << "TV p" << bd << " = c" << bd << ";\n"
        << in_pad << "p" << bd << ".insert(p" << bd << ".end(), x" << bd << ".begin(), x" << bd
        << ".end());\n"
        << body_code("0") << in_pad << "return std::pair<TV, TV>{" << outs(b, 0, nc) << ", "
        << outs(b, nc, b.outputs.size()) << "};\n"
        << pad << "}, " << args(0, nc) << ", " << args(nc, n.in.size())
        << ", lt::ScanOptions{.reverse = " << (n.ints[1] ? "true" : "false")
        << ", .is_fn_pure = false, .remat = "
        << (n.ints[2] ? "lt::Remat::recompute" : "lt::Remat::save") << "});\n"
        << pad << "TV " << r << " = " << r << "_s.first;\n"
        << pad << r << ".insert(" << r << ".end(), " << r << "_s.second.begin(), " << r
        << "_s.second.end());\n";
      return o.str();
    }
    if (n.op == Op::Fori) {
      const size_t first = n.ints[2] ? 2 : 0;
      const std::string lo = n.ints[2] ? V(n.in[0]) : std::to_string(n.ints[0]);
      const std::string hi = n.ints[2] ? V(n.in[1]) : std::to_string(n.ints[1]);
      o << pad << "TV " << r << " = lt::fori_loop(" << lo << ", " << hi << ", [&](const Tensor& it"
        << bd << ", const TV& c" << bd << ") {\n"
        << in_pad << "TV p" << bd << " = {it" << bd << "};\n"
        << in_pad << "p" << bd << ".insert(p" << bd << ".end(), c" << bd << ".begin(), c" << bd
        << ".end());\n"
        << body_code("0") << in_pad << "return " << outs(b, 0, b.outputs.size()) << ";\n"
        << pad << "}, " << args(first, n.in.size()) << ");\n";
      return o.str();
    }
    // while: the body's code once, pasted into the condition and the step
    const size_t nc = n.in.size();
    const std::string code = body_code("0");
    o << pad << "TV " << r << " = lt::while_loop([&](const TV& p" << bd << ") {\n"
      << code << in_pad << "return " << var(bd, b.outputs[nc]) << ";\n"
      << pad << "}, [&](const TV& p" << bd << ") {\n"
      << code << in_pad << "return " << outs(b, 0, nc) << ";\n"
      << pad << "}, " << args(0, nc) << ");\n";
    return o.str();
  }
};

void collect_literals(const Program& p, std::vector<double>& out, std::map<int64_t, bool>& groups) {
  // the emitter's order: a node's own literal, then (for a group's first call) its body's
  for (const Node& n : p.nodes) {
    if (perturbable(n)) out.push_back(n.f);
    if (n.op == Op::Pure) {
      if (groups[n.ints[0]]) continue;
      groups[n.ints[0]] = true;
    }
    for (const Program& b : n.bodies) collect_literals(b, out, groups);
  }
}

void collect_inputs(const Program& p, const DataSet* d, std::vector<std::vector<double>>& out,
                    std::map<int64_t, bool>& groups) {
  for (const Node& n : p.nodes) {
    if (n.op == Op::Input) {
      const std::vector<double>* v = &n.data;
      if (d) {
        auto it = d->inputs.find(&n);
        if (it != d->inputs.end()) v = &it->second;
      }
      out.push_back(*v);
    }
    if (n.op == Op::Pure) {
      if (groups[n.ints[0]]) continue;
      groups[n.ints[0]] = true;
    }
    for (const Program& b : n.bodies) collect_inputs(b, d, out, groups);
  }
}

std::string data_cpp(const std::string& name, const std::vector<std::vector<double>>& data) {
  std::ostringstream o;
  o << "const fuzzreg::Data " << name << " = {\n";
  for (const auto& v : data) o << "    " << list(v) << ",\n";
  o << "};\n";
  return o.str();
}

std::string expectations(const Program& p, const RefResult& ref, const std::string& outs,
                         const std::string& pad) {
  std::ostringstream o;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const RTensor& t = ref.nodes[static_cast<size_t>(p.outputs[k])];
    std::vector<double> tol(t.v.size());
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = t.u[i] ? -1 : tolerance(t, i);
    o << pad << "fuzzreg::expect_values(" << outs << "[" << k << "], " << list(t.v) << ",\n"
      << pad << "                       " << list(tol) << ", \"output " << k << "\");\n";
  }
  return o.str();
}

std::string test_name(uint64_t seed, const std::string& key) {
  std::string k;
  for (char c : key) k += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return "Seed" + std::to_string(seed) + "_" + k;
}

}  // namespace

std::string regression_source(const Program& p, bool grad, uint64_t seed, const Failure& failure) {
  const std::string name = test_name(seed, failure.key);
  char oracle = failure.key.empty() ? 'a' : failure.key[0];
  std::string crash_stage;
  if (failure.key == "crash") {
    // a crash: the stage it happened in ("in b:cse"), after a run with every pass on
    const size_t at = failure.what.rfind(" in ");
    crash_stage = at == std::string::npos ? "a" : failure.what.substr(at + 4);
    oracle = crash_stage == "d" ? 'd' : 'x';
  }
  Emitter em;
  em.grad = oracle == 'd';
  const std::string code = em.program(
      p, 0, [](int) { return std::string("?"); }, [](int) { return std::string("?"); }, "0", "  ");
  std::ostringstream o;
  o << "// Found by lt_fuzz (seed " << seed << ", shrunk); oracle " << failure.key << ":\n";
  {
    std::istringstream w(failure.what);
    std::string line;
    while (std::getline(w, line)) o << "//   " << line << "\n";
  }
  o << "// Reproduce: lt_fuzz --seed " << seed << " --count 1 --shrink\n//\n// The program:\n";
  {
    std::istringstream t(to_text(p));
    std::string line;
    while (std::getline(t, line)) o << "//   " << line << "\n";
  }
  o << "#include <gtest/gtest.h>\n\n#include <lazytrace/lazytrace.h>\n\n#include "
       "\"regression_helpers.h\"\n\n"
    << "namespace {\n\nusing lt::Tensor;\nusing TV = std::vector<lt::Tensor>;\n\n";
  o << "TV program_" << name
    << "(const fuzzreg::Data& in, const std::vector<double>& lit, TV* leaves) {\n"
    << "  (void)in;\n  (void)lit;\n  (void)leaves;\n"
    << code << "  return TV{";
  for (size_t k = 0; k < p.outputs.size(); ++k) o << (k ? ", " : "") << "v" << p.outputs[k];
  o << "};\n}\n\n";

  // data and expected values
  std::vector<std::vector<double>> in1;
  std::vector<double> lit1;
  {
    std::map<int64_t, bool> g1, g2;
    collect_inputs(p, nullptr, in1, g1);
    collect_literals(p, lit1, g2);
  }
  DataSet data;
  make_inputs(p, data_seed(seed), grad, data);
  ExecOptions eo;
  eo.random_seed = seed;
  if (failure.key != "crash") {  // a program that crashes does not run here
    ExecResult run = execute(p, data, eo);
    data.random = run.random;
  }
  RefResult ref = run_reference(p, data);
  o << data_cpp("kIn_" + name, in1);
  o << "const std::vector<double> kLit_" << name << " = " << list(lit1)
    << ";\n\n}  // namespace\n\n";
  o << "TEST(FuzzRegression, DISABLED_" << name << ") {\n";
  o << "  lt::manual_seed(" << seed << ");\n";
  if (oracle == 'b') {
    o << "  fuzzreg::PassesOff off({\"" << failure.key.substr(2) << "\"});\n";
  }
  if (oracle == 'x') {
    o << "  // every pass on, then the stage lt_fuzz crashed in (" << crash_stage << ")\n"
      << "  {\n    TV out = program_" << name << "(kIn_" << name << ", kLit_" << name
      << ", nullptr);\n"
      << "    lt::sync(out);\n  }\n";
    if (crash_stage.rfind("b:", 0) == 0)
      o << "  fuzzreg::PassesOff off({\"" << crash_stage.substr(2) << "\"});\n";
  }
  if (failure.key == "exec") {
    o << "  EXPECT_NO_THROW({\n    TV out = program_" << name << "(kIn_" << name << ", kLit_"
      << name << ", nullptr);\n    lt::sync(out);\n  });\n}\n";
    return o.str();
  }
  if (oracle == 'c') {
    Program q = perturb_scalars(p, seed);
    DataSet d2;
    fresh_inputs(q, rerun_seed(seed), grad, d2);
    ExecOptions e2 = eo;
    e2.random_seed = seed + 7919;
    ExecResult run2 = execute(q, d2, e2);
    d2.random = run2.random;
    RefResult ref2 = run_reference(q, d2);
    std::vector<std::vector<double>> in2;
    std::vector<double> lit2;
    std::map<int64_t, bool> g1, g2;
    collect_inputs(q, &d2, in2, g1);
    collect_literals(q, lit2, g2);
    o << "  {\n    TV out = program_" << name << "(kIn_" << name << ", kLit_" << name
      << ", nullptr);\n"
      << "    lt::sync(out);\n  }\n"
      << "  // the same structure with new data and numbers: a cache hit, nothing compiles\n"
      << "  " << data_cpp("in2", in2) << "  const std::vector<double> lit2 = " << list(lit2)
      << ";\n"
      << "  lt::manual_seed(" << seed + 7919 << ");\n"
      << "  const int64_t compiles = lt::metrics::counter(\"CompileCount\");\n"
      << "  TV out = program_" << name << "(in2, lit2, nullptr);\n  lt::sync(out);\n"
      << "  EXPECT_EQ(lt::metrics::counter(\"CompileCount\") - compiles, 0);\n";
    if (ref2.ok) o << expectations(q, ref2, "out", "  ");
    o << "}\n";
    return o.str();
  }
  if (oracle == 'd') {
    // per-element central differences of the reference, in float64
    const std::vector<std::vector<double>> w = loss_weights(p, seed);
    o << "  TV leaves;\n  TV out = program_" << name << "(kIn_" << name << ", kLit_" << name
      << ", &leaves);\n"
      << "  Tensor loss;\n";
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const Node& n = p.nodes[static_cast<size_t>(p.outputs[k])];
      if (!lazytrace::is_floating(n.dtype)) continue;
      o << "  {\n    Tensor w = lt::astype(lt::tensor(std::vector<double>" << list(w[k]) << ", out["
        << k << "].shape()), out[" << k << "].dtype());\n"
        << "    Tensor term = lt::sum(out[" << k << "] * w);\n"
        << "    loss = loss.defined() ? loss + term : term;\n  }\n";
    }
    o << "  loss.backward();\n";
    bool f64 = true;
    for (const Node& n : p.nodes)
      if (n.op != Op::Input && lazytrace::is_floating(n.dtype) && n.dtype != DType::float64)
        f64 = false;
    const double rel = f64 ? 1e-6 : 3e-3;
    size_t leaf = 0;
    for (const Node& n : p.nodes) {
      if (n.op != Op::Input || !(n.dtype == DType::float32 || n.dtype == DType::float64)) continue;
      std::vector<double> g(static_cast<size_t>(numel(n.shape)));
      double gmax = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        auto at = [&](double s) {
          DataSet ds = data;
          std::vector<double>& x = ds.inputs[&n];
          if (x.empty()) x = n.data;
          x[i] += s;
          return weighted_sum(p, run_reference(p, ds, false), w);
        };
        g[i] = (at(1e-5) - at(-1e-5)) / 2e-5;
        gmax = std::max(gmax, std::abs(g[i]));
      }
      std::vector<double> tol(g.size());
      for (size_t i = 0; i < g.size(); ++i) tol[i] = rel * (std::abs(g[i]) + gmax) + 1e-7;
      o << "  {\n    Tensor g = leaves[" << leaf << "].grad();\n"
        << "    ASSERT_TRUE(g.defined());\n"
        << "    fuzzreg::expect_values(g, " << list(g) << ",\n"
        << "                           " << list(tol) << ", \"the gradient of input " << leaf
        << "\");\n  }\n";
      ++leaf;
    }
    o << "}\n";
    return o.str();
  }
  o << "  TV out = program_" << name << "(kIn_" << name << ", kLit_" << name << ", nullptr);\n"
    << "  lt::sync(out);\n";
  if (ref.ok) o << expectations(p, ref, "out", "  ");
  o << "}\n";
  return o.str();
}

std::string write_regression(const std::string& dir, const Program& p, bool grad, uint64_t seed,
                             const Failure& failure) {
  std::filesystem::create_directories(dir);
  std::string k;
  for (char c : failure.key) k += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const std::string path = dir + "/fuzz_seed" + std::to_string(seed) + "_" + k + "_test.cpp";
  std::ofstream f(path);
  f << regression_source(p, grad, seed, failure);
  return path;
}

}  // namespace fuzz
