// The shrinker (see shrink.h).
#include "shrink.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include "executor.h"
#include "reference.h"

namespace fuzz {
namespace {

constexpr int kBudget = 500;

std::string g_self = "/proc/self/exe";

class Shrinker {
 public:
  Shrinker(bool grad, uint64_t seed, std::string key)
      : grad_(grad), seed_(seed), key_(std::move(key)) {
    opt_.only = key_;
  }

  // Whether q still fails with the key; keeps q and the failure if so.
  bool attempt(Program q) {
    if (attempts_ >= kBudget) return false;
    ++attempts_;
    dead_code(q);
    std::string why;
    if (!infer(q, nullptr, &why) || q.outputs.empty()) return false;
    if (key_ == "crash") {
      std::string sig;
      if (!crashes(g_self, q, grad_, seed_, &sig)) return false;
      cur = std::move(q);
      failure = {"crash", sig};
      return true;
    }
    Outcome o = check_program(q, grad_, seed_, opt_);
    if (o.skipped) return false;
    for (const Failure& f : o.failures)
      if (f.key == key_) {
        cur = std::move(q);
        failure = f;
        return true;
      }
    return false;
  }

  bool exhausted() const { return attempts_ >= kBudget; }

  Program cur;
  Failure failure;
  int attempts_ = 0;

 private:
  bool grad_;
  uint64_t seed_;
  std::string key_;
  CheckOptions opt_;
};

// Uses of node `from` (operands, outputs, Outer reads of direct bodies) become uses of `to`.
void replace_uses(Program& q, int from, int to) {
  for (size_t i = static_cast<size_t>(from) + 1; i < q.nodes.size(); ++i) {
    Node& n = q.nodes[i];
    for (int& x : n.in)
      if (x == from) x = to;
    for (Program& b : n.bodies)
      for (Node& m : b.nodes)
        if (m.op == Op::Outer && m.ints[0] == from) m.ints[0] = to;
  }
  for (int& o : q.outputs)
    if (o == from) o = to;
}

// The sub-block of data (shape s) with dim d cut to n.
std::vector<double> cut(const std::vector<double>& data, const Dims& s, size_t d, int64_t n) {
  int64_t outer = 1, inner = 1;
  for (size_t j = 0; j < d; ++j) outer *= s[j];
  for (size_t j = d + 1; j < s.size(); ++j) inner *= s[j];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < inner; ++i)
        out.push_back(data[static_cast<size_t>((o * s[d] + r) * inner + i)]);
  return out;
}

}  // namespace

void set_self_path(const std::string& path) {
  g_self = path;
}

ChildResult run_in_child(const std::string& self, const Program& p, bool grad, uint64_t seed,
                         const std::vector<std::string>& extra) {
  ChildResult r;
  char path[] = "/tmp/lt_fuzz_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return r;
  close(fd);
  {
    std::ofstream f(path);
    f << serialize(p);
  }
  std::vector<std::string> args = {self,     "--check-file",  path, "--seed", std::to_string(seed),
                                   "--grad", grad ? "1" : "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string err_path = std::string(path) + ".err";
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (null >= 0) dup2(null, 1);
    if (err >= 0) dup2(err, 2);
    execv(self.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  std::remove(path);
  std::string where;
  {
    std::ifstream e(err_path);
    std::string line;
    while (std::getline(e, line)) {
      const size_t at = line.find("failed: crash: signal");
      const size_t in = line.rfind(" in ");
      if (at != std::string::npos && in != std::string::npos && where.empty())
        where = line.substr(in + 4);
    }
  }
  std::remove(err_path.c_str());
  if (pid <= 0) return r;
  r.ran = true;
  if (WIFSIGNALED(status)) {
    r.crashed = true;
    r.signal = std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" +
               strsignal(WTERMSIG(status)) + ") in " + (where.empty() ? "?" : where);
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  return r;
}

bool crashes(const std::string& self, const Program& p, bool grad, uint64_t seed,
             std::string* signal) {
  ChildResult r = run_in_child(self, p, grad, seed, {});
  if (r.crashed && signal) *signal = r.signal;
  return r.crashed;
}

ShrinkResult shrink(const Program& p, bool grad, uint64_t seed, const std::string& key) {
  Shrinker s(grad, seed, key);
  Program start = p;
  freeze_inputs(start, data_seed(seed), grad);
  ShrinkResult r;
  if (!s.attempt(start)) {
    // the failure depends on something the frozen data does not reproduce: keep it as is
    r.program = start;
    r.failure = {key, "(did not reproduce with fixed inputs)"};
    r.attempts = s.attempts_;
    return r;
  }
  bool progress = true;
  while (progress && !s.exhausted()) {
    progress = false;
    // 1. fewer outputs
    for (size_t k = 0; s.cur.outputs.size() > 1 && k < s.cur.outputs.size(); ++k) {
      Program q = s.cur;
      q.outputs.erase(q.outputs.begin() + static_cast<std::ptrdiff_t>(k));
      if (s.attempt(q)) {
        progress = true;
        --k;
      }
    }
    // 2. nodes replaced by their values (the reference's, with the run's random draws)
    {
      bool again = true;
      while (again && !s.exhausted()) {
        again = false;
        DataSet data;
        make_inputs(s.cur, data_seed(seed), grad, data);
        if (key != "crash") {  // (a program that crashes runs only in a child)
          ExecOptions eo;
          eo.random_seed = seed;
          ExecResult run = execute(s.cur, data, eo);
          data.random = run.random;
        }
        RefResult ref = run_reference(s.cur, data);
        if (!ref.ok) break;
        for (size_t i = s.cur.nodes.size(); i-- > 0;) {
          const Node& n = s.cur.nodes[i];
          if (n.op == Op::Input || is_multi(n.op)) continue;
          const RTensor& v = ref.nodes[i];
          if (std::any_of(v.u.begin(), v.u.end(), [](uint8_t u) { return u != 0; })) continue;
          Program q = s.cur;
          Node in;
          in.op = Op::Input;
          in.dtype = n.dtype;
          in.shape = n.shape;
          in.ints = {kFixed, 0, 0};
          in.data = v.v;
          q.nodes[i] = in;
          if (s.attempt(q)) {
            progress = again = true;
            break;
          }
        }
      }
    }
    // 3. bypasses: a node's uses read an operand of the same dtype and shape instead
    for (size_t i = s.cur.nodes.size(); i-- > 0 && !s.exhausted();) {
      if (i >= s.cur.nodes.size()) continue;
      const Node& n = s.cur.nodes[i];
      if (is_multi(n.op) || n.op == Op::Proj) continue;
      for (int x : n.in) {
        const Node& m = s.cur.nodes[static_cast<size_t>(x)];
        if (is_multi(m.op) || m.dtype != n.dtype || m.shape != n.shape) continue;
        Program q = s.cur;
        replace_uses(q, static_cast<int>(i), x);
        if (s.attempt(q)) {
          progress = true;
          break;
        }
      }
    }
    // 4. bodies: bypasses inside, fewer scan outputs, plain options
    for (size_t i = 0; i < s.cur.nodes.size() && !s.exhausted(); ++i) {
      if (s.cur.nodes[i].bodies.empty()) continue;
      const Node& n = s.cur.nodes[i];
      if (n.op == Op::Scan && (n.ints[1] || n.ints[2])) {
        Program q = s.cur;
        q.nodes[i].ints[1] = q.nodes[i].ints[2] = 0;
        if (s.attempt(q)) progress = true;
      }
      const size_t nb = s.cur.nodes[i].bodies[0].nodes.size();
      for (size_t j = nb; j-- > 0 && !s.exhausted();) {
        // an attempt that took may have removed nodes: i may be another node now
        if (i >= s.cur.nodes.size() || s.cur.nodes[i].bodies.empty()) break;
        const Program& b = s.cur.nodes[i].bodies[0];
        if (j >= b.nodes.size()) continue;
        const Node& bn = b.nodes[j];
        if (is_multi(bn.op) || bn.op == Op::Proj) continue;
        for (int x : bn.in) {
          const Node& m = b.nodes[static_cast<size_t>(x)];
          if (is_multi(m.op) || m.dtype != bn.dtype || m.shape != bn.shape) continue;
          Program q = s.cur;
          replace_uses(q.nodes[i].bodies[0], static_cast<int>(j), x);
          dead_code(q.nodes[i].bodies[0]);
          if (s.attempt(q)) {
            progress = true;
            break;
          }
        }
      }
    }
    // 4b. assume_pure arguments the body does not read (in every call of the function)
    for (size_t i = 0; i < s.cur.nodes.size() && !s.exhausted(); ++i) {
      const Node& n = s.cur.nodes[i];
      if (n.op != Op::Pure || n.in.size() < 2) continue;
      for (size_t a = n.in.size(); a-- > 0 && !s.exhausted();) {
        if (i >= s.cur.nodes.size() || s.cur.nodes[i].op != Op::Pure ||
            a >= s.cur.nodes[i].in.size())
          break;
        const int64_t group = s.cur.nodes[i].ints[0];
        bool used = false;
        for (const Node& m : s.cur.nodes)
          if (m.op == Op::Pure && m.ints[0] == group)
            for (const Node& b : m.bodies[0].nodes)
              used |= b.op == Op::Param && b.ints[0] == static_cast<int64_t>(a);
        if (used) continue;
        Program q = s.cur;
        for (Node& m : q.nodes) {
          if (m.op != Op::Pure || m.ints[0] != group) continue;
          m.in.erase(m.in.begin() + static_cast<std::ptrdiff_t>(a));
          for (Node& b : m.bodies[0].nodes)
            if (b.op == Op::Param && b.ints[0] > static_cast<int64_t>(a)) --b.ints[0];
        }
        if (s.attempt(q)) progress = true;
      }
    }
    // 5. nothing synced early
    for (size_t i = 0; i < s.cur.nodes.size() && !s.exhausted(); ++i)
      if (s.cur.nodes[i].materialize) {
        Program q = s.cur;
        q.nodes[i].materialize = false;
        if (s.attempt(q)) progress = true;
      }
    // 6. smaller dims: one input's dim, or every dim of one size everywhere
    for (size_t i = 0; i < s.cur.nodes.size() && !s.exhausted(); ++i) {
      const Node& n = s.cur.nodes[i];
      if (n.op != Op::Input) continue;
      for (size_t d = 0; d < n.shape.size() && !s.exhausted(); ++d) {
        if (n.shape[d] <= 1) continue;
        for (int64_t to : {int64_t{1}, n.shape[d] / 2}) {
          if (to < 1 || to >= s.cur.nodes[i].shape[d]) continue;
          Program q = s.cur;
          Node& m = q.nodes[i];
          m.data = cut(m.data, m.shape, d, to);
          m.shape[d] = to;
          if (s.attempt(q)) {
            progress = true;
            break;
          }
        }
        if (i >= s.cur.nodes.size() || s.cur.nodes[i].op != Op::Input) break;
      }
    }
    std::vector<int64_t> sizes;
    for (const Node& n : s.cur.nodes)
      for (int64_t d : n.shape)
        if (d > 1 && std::find(sizes.begin(), sizes.end(), d) == sizes.end()) sizes.push_back(d);
    for (int64_t v : sizes) {
      if (s.exhausted()) break;
      Program q = s.cur;
      for (Node& n : q.nodes) {
        if (n.op != Op::Input && n.op != Op::Full && n.op != Op::BroadcastTo &&
            n.op != Op::Reshape && n.op != Op::Rand && n.op != Op::Randn)
          continue;
        for (size_t d = 0; d < n.shape.size(); ++d)
          if (n.shape[d] == v) {
            if (n.op == Op::Input) n.data = cut(n.data, n.shape, d, 1);
            n.shape[d] = 1;
          }
      }
      if (s.attempt(q)) progress = true;
    }
  }
  r.program = s.cur;
  r.failure = s.failure;
  r.attempts = s.attempts_;
  return r;
}

}  // namespace fuzz
