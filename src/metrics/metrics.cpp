#include "lazytrace/metrics/metrics.h"
#include "metrics/known.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace lazytrace::metrics {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<Counter*> counters;
  std::vector<Timer*> timers;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: counters are static objects too
  return *r;
}

std::string format_ns(int64_t ns) {
  char buf[64];
  if (ns >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.3fs", ns / 1e9);
  else if (ns >= 1000000)
    std::snprintf(buf, sizeof buf, "%.3fms", ns / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3fus", ns / 1e3);
  return buf;
}

}  // namespace

Counter::Counter(const char* name) : name_(name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.counters.push_back(this);
}

Timer::Timer(const char* name) : name_(name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.timers.push_back(this);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {
struct TickOrigin {
  int64_t t0 = ticks();
  int64_t ns0 = now_ns();
};
TickOrigin g_origin;
}  // namespace

double ns_per_tick() {
#if defined(__x86_64__)
  int64_t ns = now_ns() - g_origin.ns0;
  if (ns < 2000000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ns = now_ns() - g_origin.ns0;
  }
  int64_t t = ticks() - g_origin.t0;
  return t > 0 ? static_cast<double>(ns) / static_cast<double>(t) : 1.0;
#else
  return 1.0;
#endif
}

int64_t Timer::total_ns() const {
  int64_t t = total_ticks_.load(std::memory_order_relaxed);
  int64_t ns = total_ns_.load(std::memory_order_relaxed);
  return t ? ns + static_cast<int64_t>(static_cast<double>(t) * ns_per_tick()) : ns;
}

ScopedTimer::ScopedTimer(Timer& t) : timer_(t), start_(ticks()) {}
ScopedTimer::~ScopedTimer() {
  timer_.add_ticks(ticks() - start_);
}

int64_t counter(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Counter* c : r.counters)
    if (name == c->name()) return c->value();
  for (Timer* t : r.timers)
    if (name == std::string(t->name()) + "Ns") return t->total_ns();
  for (Timer* t : r.timers)
    if (name == std::string(t->name()) + "Samples") return t->samples();
  return 0;
}

int64_t timer_ns(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Timer* t : r.timers)
    if (name == t->name()) return t->total_ns();
  return 0;
}

std::vector<std::string> counter_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (Counter* c : r.counters) out.push_back(c->name());
  return out;
}

std::vector<std::string> timer_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (Timer* t : r.timers) out.push_back(t->name());
  return out;
}

std::string report() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<Counter*> cs = r.counters;
  std::vector<Timer*> ts = r.timers;
  auto by_name = [](auto* a, auto* b) { return std::string(a->name()) < b->name(); };
  std::sort(cs.begin(), cs.end(), by_name);
  std::sort(ts.begin(), ts.end(), by_name);
  std::ostringstream os;
  for (Timer* t : ts) {
    os << "Metric: " << t->name() << "\n";
    os << "  TotalSamples: " << t->samples() << "\n";
    os << "  Accumulator: " << format_ns(t->total_ns()) << "\n";
    if (t->samples() > 0) os << "  Mean: " << format_ns(t->total_ns() / t->samples()) << "\n";
  }
  for (Counter* c : cs) {
    os << "Counter: " << c->name() << "\n";
    os << "  Value: " << c->value() << "\n";
  }
  return os.str();
}

void reset() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Counter* c : r.counters) c->reset();
  for (Timer* t : r.timers) t->reset();
}

}  // namespace lazytrace::metrics

namespace lazytrace::metrics {
Counter trace_count("TraceCount");
Counter compile_count("CompileCount");
Counter cache_hit("CacheHit");
Counter cache_miss("CacheMiss");
Counter execute_count("ExecuteCount");
Counter sync_count("SyncCount");
Counter transfer_to_host("TransferToHostCount");
Counter cache_evictions("CacheEvictions");
Counter assume_pure_trace("AssumePureTrace");
Counter assume_pure_hit("AssumePureHit");
Counter assume_pure_backward_trace("AssumePureBackwardTrace");
Counter call_pack_built("CallPackBuilt");
Counter compiled_trace("CompiledFnTrace");
Counter compiled_hit("CompiledFnHit");
Counter loop_trace("LoopTrace");
Counter loop_hit("LoopHit");
Counter loop_backward_trace("LoopBackwardTrace");
Counter loop_grad_factored("LoopGradFactored");
Counter updates_beside_loops("UpdatesBesideLoops");
Counter loop_slices_evicted("LoopSlicesEvicted");
Counter body_compile_count("BodyCompileCount");
Counter donated_buffers("DonatedBuffers");
Counter fused_steps_merged("FusedStepsMerged");
Counter jit_kernels_made("JitKernelsMade");
Counter jit_fused_runs("JitFusedRuns");
Counter jit_ranged_runs("JitRangedRuns");
Counter collective_count("CollectiveCount");
Counter collective_bytes("CollectiveBytes");
Counter collectives_ahead("CollectivesAhead");
Counter collectives_in_loops("CollectivesInLoops");

Counter& named_counter(const std::string& name) {
  static std::mutex mu;
  static auto* made = new std::vector<std::pair<std::unique_ptr<std::string>, Counter*>>();
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [n, c] : *made)
    if (*n == name) return *c;
  auto owned = std::make_unique<std::string>(name);
  auto* c = new Counter(owned->c_str());  // registered for good, like the static counters
  made->emplace_back(std::move(owned), c);
  return *c;
}
Timer trace_time("TraceTime");
Timer compile_time("CompileTime");
Timer execute_time("ExecuteTime");
Timer kernel_time("KernelTime");
Timer collective_time("CollectiveTime");
Timer collective_wait_time("CollectiveWaitTime");
Timer transfer_to_host_time("TransferToHostTime");
}  // namespace lazytrace::metrics
