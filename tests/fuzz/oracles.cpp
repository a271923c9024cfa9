// The oracles (see oracles.h).
#include "oracles.h"

#include <lazytrace/lazytrace.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <sstream>

#include "executor.h"

namespace fuzz {
namespace {

constexpr double kTolerance = 8;  // a value may lie 8x its error estimate from the reference

std::string num(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

std::string where_in(const Dims& shape, size_t flat) {
  std::vector<int64_t> idx(shape.size());
  auto f = static_cast<int64_t>(flat);
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = f % shape[i];
    f /= shape[i];
  }
  return dims_str(idx);
}

std::string describe(const Program& p, size_t k) {
  const int o = p.outputs[k];
  const Node& n = p.nodes[static_cast<size_t>(o)];
  return "output " + std::to_string(k) + " (%" + std::to_string(o) + " " + op_name(n.op) + ", " +
         lazytrace::dtype_short(n.dtype) + dims_str(n.shape) + ")";
}

// got against the reference: "" or what differs first.
std::string against_reference(const Program& p, const std::vector<std::vector<double>>& got,
                              const RefResult& ref, Outcome* counts) {
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const RTensor& r = ref.nodes[static_cast<size_t>(p.outputs[k])];
    const std::vector<double>& g = got[k];
    if (g.size() != r.v.size()) return describe(p, k) + ": " + std::to_string(g.size()) + " values";
    for (size_t i = 0; i < g.size(); ++i) {
      if (r.u[i]) {
        if (counts) ++counts->undecided_elements;
        continue;
      }
      const double tol = tolerance(r, i);
      if (counts) {
        ++counts->checked_elements;
        counts->exact_elements += tol == 0;
      }
      if (!(std::abs(g[i] - r.v[i]) <= tol))
        return describe(p, k) + " at " + where_in(r.shape, i) + ": got " + num(g[i]) +
               ", expected " + num(r.v[i]) + (tol == 0 ? " exactly" : " within " + num(tol));
    }
  }
  return "";
}

// a pass-off run against the all-on run, each within its tolerance of the reference
std::string against_run(const Program& p, const std::vector<std::vector<double>>& got,
                        const std::vector<std::vector<double>>& base, const RefResult& ref) {
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const RTensor& r = ref.nodes[static_cast<size_t>(p.outputs[k])];
    for (size_t i = 0; i < got[k].size(); ++i) {
      if (r.u[i]) continue;
      const double tol = 2 * tolerance(r, i);
      if (!(std::abs(got[k][i] - base[k][i]) <= tol))
        return describe(p, k) + " at " + where_in(r.shape, i) + ": got " + num(got[k][i]) +
               ", all passes on give " + num(base[k][i]) +
               (tol == 0 ? " (must be equal)" : " within " + num(tol)) +
               "; the reference: " + num(r.v[i]);
    }
  }
  return "";
}

// `distinct`: no two random ops of the run drew the same values (not where other threads
// draw at the same time: one's manual_seed may restart the generator between two of this
// run's draws, which then draw alike, as two draws after two manual_seed calls would).
std::string check_random(const Program& p, const ExecResult& r, bool distinct) {
  std::vector<std::pair<const Node*, const std::vector<double>*>> seen;
  for (const auto& [node, v] : r.random) {
    for (double x : v) {
      if (node->op == Op::Rand && !(x >= 0 && x < 1)) return "rand gave " + num(x);
      if (node->op == Op::Randn && !(std::abs(x) < 10)) return "randn gave " + num(x);
    }
    for (auto& [other, w] : seen)
      if (distinct && v.size() >= 2 && *w == v)
        return "two random ops (%" + std::to_string(node - p.nodes.data()) + ", %" +
               std::to_string(other - p.nodes.data()) + ") drew the same values";
    seen.emplace_back(node, &v);
  }
  return "";
}

bool perturbable(const Node& n) {
  if (n.f == 0 || n.f == 1 || n.f == -1) return false;
  if (n.op == Op::BinaryScalar)
    return n.sdtype == DType::float32 && !(n.ints.size() > 1 && n.ints[1]) &&
           static_cast<BK>(n.kind) != BK::Pow;
  if (n.op == Op::WhereScalar) return n.sdtype == DType::float32;
  if (n.op == Op::Full) return lazytrace::is_floating(n.dtype);
  return false;
}

// The numbers of the literals that stay as they are: lazytrace gives equal literals of a
// dtype one class (part of the compile key), so a moved literal must not leave or join one.
void pinned(const Program& p, std::set<double>& out) {
  for (const Node& n : p.nodes) {
    const bool lit = n.op == Op::BinaryScalar || n.op == Op::WhereScalar || n.op == Op::Full;
    if (lit && !perturbable(n)) {
      out.insert(n.f);
      out.insert(std::trunc(n.f));
    }
    for (const Program& b : n.bodies) pinned(b, out);
  }
}

void perturb(Program& p, double factor, const std::set<double>& pin) {
  for (Node& n : p.nodes) {
    if (perturbable(n) && !pin.count(n.f)) {
      const double v = static_cast<double>(static_cast<float>(n.f * factor));
      if (!pin.count(v) && v != 0 && v != 1 && v != -1) n.f = v;
    }
    for (Program& b : n.bodies) perturb(b, factor, pin);
  }
}

int64_t counter(const char* name) {
  return lazytrace::metrics::counter(name);
}

// The passes switched off at the start (LAZYTRACE_DISABLE_PASSES): what (b) restores, so
// threads that switch passes concurrently never leave one off for the others.
const std::vector<std::string>& baseline_passes() {
  static const std::vector<std::string> base = lazytrace::debug::disabled_passes();
  return base;
}

struct PassesOff {
  explicit PassesOff(const std::vector<std::string>& names) {
    std::vector<std::string> off = baseline_passes();
    off.insert(off.end(), names.begin(), names.end());
    lazytrace::debug::set_disabled_passes(off);
  }
  ~PassesOff() { lazytrace::debug::set_disabled_passes(baseline_passes()); }
};

thread_local char* g_stage = nullptr;

void stage(const std::string& s) {
  if (!g_stage) return;
  std::snprintf(g_stage, kStageSize, "%s", s.c_str());
}

}  // namespace

void set_stage_slot(char* slot) {
  g_stage = slot;
}

double tolerance(const RTensor& t, size_t i) {
  return t.e[i] == 0 ? 0 : kTolerance * t.e[i];
}

void freeze_inputs(Program& p, uint64_t seed, bool smooth) {
  DataSet d;
  make_inputs(p, seed, smooth, d);
  std::function<void(Program&)> walk = [&](Program& q) {
    for (Node& n : q.nodes) {
      auto it = d.inputs.find(&n);
      if (it != d.inputs.end()) n.data = it->second;
      for (Program& b : n.bodies) walk(b);
    }
  };
  walk(p);
}

void fresh_inputs(const Program& p, uint64_t seed, bool smooth, DataSet& out) {
  make_inputs(p, seed, smooth, out, true);
}

Program perturb_scalars(const Program& p, uint64_t seed) {
  Program q = p;
  std::set<double> pin;
  pinned(p, pin);
  perturb(q, seed % 2 ? 1.0625 : 0.9375, pin);
  return q;
}

std::vector<std::vector<double>> loss_weights(const Program& p, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5DEECE66DULL);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<std::vector<double>> w;
  for (int o : p.outputs) {
    const Node& n = p.nodes[static_cast<size_t>(o)];
    std::vector<double> v(static_cast<size_t>(numel(n.shape)));
    for (double& x : v) x = static_cast<double>(static_cast<float>(u(rng)));
    w.push_back(std::move(v));
  }
  return w;
}

Outcome check_program(const Program& p, bool grad, uint64_t seed, const CheckOptions& opt) {
  Outcome out;
  auto want = [&](char c) {
    if (!opt.only.empty()) return opt.only[0] == c || opt.only == "exec";
    return opt.oracles.count(c) > 0;
  };
  baseline_passes();
  DataSet data;
  make_inputs(p, data_seed(seed), grad, data);
  ExecOptions eo;
  eo.random_seed = seed;
  eo.sync_all = seed % 5 == 0;
  eo.release_inputs = seed % 3 != 0;
  stage("a");
  ExecResult r1 = execute(p, data, eo);
  if (!r1.ok) {
    out.failures.push_back({"exec", "lazytrace throws: " + r1.error});
    return out;
  }
  if (opt.only == "exec") return out;
  data.random = r1.random;
  RefResult ref = run_reference(p, data);
  if (!ref.ok) {
    out.skipped = true;
    out.skip_why = ref.why;
    return out;
  }
  if (want('a')) {
    std::string d = against_reference(p, r1.outputs, ref, &out);
    if (d.empty()) d = check_random(p, r1, !opt.shared_random);
    if (!d.empty()) out.failures.push_back({"a", d});
  }
  if (want('c')) {
    // the same structure, new data, new scalars, a new random seed: nothing compiles
    Program q = perturb_scalars(p, seed);
    DataSet d2;
    fresh_inputs(q, rerun_seed(seed), grad, d2);
    ExecOptions e2 = eo;
    e2.random_seed = seed + 7919;
    stage("c");
    const int64_t compiles = counter("CompileCount"), hits = counter("CacheHit");
    ExecResult r2 = execute(q, d2, e2);
    const int64_t dc = counter("CompileCount") - compiles, dh = counter("CacheHit") - hits;
    if (!r2.ok) {
      out.failures.push_back({"c", "the rerun throws: " + r2.error});
    } else {
      d2.random = r2.random;
      RefResult ref2 = run_reference(q, d2);
      std::string d;
      if (opt.count_compiles && dc != 0)
        d = "the rerun with new data compiled " + std::to_string(dc) +
            " time(s) (cache hits: " + std::to_string(dh) + ")";
      else if (opt.count_compiles && dh == 0)
        d = "the rerun with new data found no cached program";
      if (d.empty() && ref2.ok) d = against_reference(q, r2.outputs, ref2, nullptr);
      if (!d.empty()) out.failures.push_back({"c", d});
    }
  }
  if (want('b')) {
    std::vector<std::string> passes =
        opt.passes.empty() ? lazytrace::debug::pass_names() : opt.passes;
    passes.push_back("all");
    for (const std::string& name : passes) {
      const std::string key = "b:" + name;
      if (!opt.only.empty() && opt.only != key) continue;
      ExecResult rb;
      stage(key);
      {
        PassesOff off({name});
        rb = execute(p, data, eo);
      }
      std::string d;
      if (!rb.ok) {
        d = "lazytrace throws: " + rb.error;
      } else if (opt.shared_random && rb.random != r1.random) {
        DataSet db = data;
        db.random = rb.random;
        RefResult refb = run_reference(p, db);
        if (refb.ok) d = against_reference(p, rb.outputs, refb, nullptr);
      } else {
        d = against_run(p, rb.outputs, r1.outputs, ref);
        if (d.empty())
          for (const auto& [node, v] : r1.random)
            if (rb.random[node] != v) {
              d = "random draws differ from all passes on (%" +
                  std::to_string(node - p.nodes.data()) + ")";
              break;
            }
      }
      if (!d.empty()) out.failures.push_back({key, d});
    }
  }
  if (grad && want('d')) {
    const std::vector<std::vector<double>> w = loss_weights(p, seed);
    ExecOptions eg = eo;
    eg.grad = true;
    eg.loss_weights = &w;
    stage("d");
    ExecResult rg = execute(p, data, eg);
    if (!rg.ok) {
      out.failures.push_back({"d", "backward throws: " + rg.error});
      return out;
    }
    // a random direction over the floating inputs
    std::mt19937_64 rng(seed ^ 0xD1B54A32D192ED03ULL);
    std::uniform_real_distribution<double> u(-1, 1);
    std::map<const Node*, std::vector<double>> dir;
    double dd = 0, scale = 0;
    for (const auto& [node, g] : rg.grads) {
      std::vector<double>& v = dir[node];
      v.resize(static_cast<size_t>(numel(node->shape)));
      for (double& x : v) x = u(rng);
      for (size_t i = 0; i < g.size(); ++i) {
        dd += g[i] * v[i];
        scale += std::abs(g[i] * v[i]);
      }
    }
    const double h = 1e-5;
    auto at = [&](double s) {
      DataSet ds = data;
      for (auto& [node, v] : dir) {
        std::vector<double>& x = ds.inputs[node];
        if (x.empty()) x = node->data;
        for (size_t i = 0; i < x.size(); ++i) x[i] += s * v[i];
      }
      RefResult r = run_reference(p, ds, false);
      return r.ok ? weighted_sum(p, r, w) : NAN;
    };
    const double fd = (at(h) - at(-h)) / (2 * h), fd_half = (at(h / 2) - at(-h / 2)) / h;
    bool f64 = true;
    for (const Node& n : p.nodes)
      if (n.op != Op::Input && lazytrace::is_floating(n.dtype) && n.dtype != DType::float64)
        f64 = false;
    const double rel = f64 ? 1e-6 : 3e-3;
    const double tol = rel * (scale + std::abs(fd)) + 1e-7;
    // differences over the step and half of it that disagree (where the function is smooth
    // they differ by O(h^2)): a kink lies within the step (operands of a minimum closer than
    // it, an amax tie), where central differences do not give the gradient
    out.kink = std::abs(fd - fd_half) > tol;
    if (std::isfinite(fd) && !out.kink && !(std::abs(dd - fd) <= tol))
      out.failures.push_back({"d", "the gradient along a random direction is " + num(dd) +
                                       ", central differences of the reference give " + num(fd) +
                                       " (tolerance " + num(tol) + ")"});
  }
  return out;
}

}  // namespace fuzz
