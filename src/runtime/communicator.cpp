#include "runtime/communicator.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/hash.h"
#include "lazytrace/core/error.h"
#include "lazytrace/core/half.h"

namespace lazytrace::runtime {
namespace {

thread_local Communicator* t_comm = nullptr;
std::mutex g_process_mu;
// never destroyed: a detached thread may still use it while the process exits
std::shared_ptr<Communicator>& g_process_owner = *new std::shared_ptr<Communicator>();
std::atomic<Communicator*> g_process{nullptr};  // null: the single process

// The sums, scalings and conversions of exchanged buffers below are one pass over memory
// each, built in a clone per x86-64 level (runtime/ is built for any x86-64) that the
// loader picks for the CPU at hand: 16-bit floats' rounding takes a few operations an
// element, which a 16-float vector does at the memory's pace and SSE2's 4 floats do not.
// (GCC 12 takes x86-64 levels as clones; a clone is picked by glibc's ifunc)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    defined(__linux__) && defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) &&        \
    !defined(__SANITIZE_THREAD__)
#define LT_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define LT_INLINE __attribute__((always_inline)) inline  // into each clone
#else
#define LT_VECTOR_CLONES
#define LT_INLINE inline
#endif

// (one loop per op, so that each vectorizes)
template <typename A, typename F>
LT_INLINE void combine(void* acc, const void* in, int64_t count, F f) {
  A* a = static_cast<A*>(acc);
  const A* b = static_cast<const A*>(in);
  for (int64_t i = 0; i < count; ++i) a[i] = f(a[i], b[i]);
}

// f(op's function) for op; max and min propagate NaN, as torch.maximum does
template <typename C, typename F>
LT_INLINE void with_op(ReduceOp op, F f) {
  switch (op) {
    case ReduceOp::Sum:
      return f([](C x, C y) { return x + y; });
    case ReduceOp::Max:
      return f([](C x, C y) { return (x != x || y != y) ? (x != x ? x : y) : (y > x ? y : x); });
    case ReduceOp::Min:
      return f([](C x, C y) { return (x != x || y != y) ? (x != x ? x : y) : (y < x ? y : x); });
  }
}

template <typename A>
LT_INLINE void reduce_typed(void* acc, const void* in, int64_t count, ReduceOp op) {
  with_op<A>(op, [&](auto f) { combine<A>(acc, in, count, f); });
}

// out[i] = O(op(a[i], b[i]) * scale) in float32, b's elements 16-bit floats H
template <typename A, typename H, typename O>
LT_INLINE void reduce_wide_typed(const void* a, const void* b, int64_t n, ReduceOp op, void* out,
                                 float scale) {
  const A* x = static_cast<const A*>(a);
  const H* y = static_cast<const H*>(b);
  O* o = static_cast<O*>(out);
  with_op<float>(op, [&](auto f) {
    for (int64_t i = 0; i < n; ++i) o[i] = O(f(float(x[i]), float(y[i])) * scale);
  });
}

template <typename H>
LT_INLINE void reduce_wide_as(const void* a, bool a_wide, const void* b, int64_t n, ReduceOp op,
                              void* out, bool out_wide, float scale) {
  if (a_wide && out_wide) return reduce_wide_typed<float, H, float>(a, b, n, op, out, scale);
  if (a_wide) return reduce_wide_typed<float, H, H>(a, b, n, op, out, scale);
  if (out_wide) return reduce_wide_typed<H, H, float>(a, b, n, op, out, scale);
  reduce_wide_typed<H, H, H>(a, b, n, op, out, scale);
}

template <typename H>
LT_INLINE void widen_typed(const H* p, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(p[i]);
}

template <typename H>
LT_INLINE void narrow_typed(const float* f, int64_t n, H* out, float scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = H(f[i] * scale);
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

LT_VECTOR_CLONES void reduce_into(void* acc, const void* in, int64_t count, DType dtype,
                                  ReduceOp op) {
  switch (dtype) {
    case DType::float32:
      return reduce_typed<float>(acc, in, count, op);
    case DType::float64:
      return reduce_typed<double>(acc, in, count, op);
    case DType::float16:
    case DType::bfloat16:  // summed in float32 and rounded once: reduce_wide
      fail("reduce_into", dtype_name(dtype), " is summed in float32 (reduce_wide).");
    case DType::int32:
      return reduce_typed<int32_t>(acc, in, count, op);
    case DType::int64:
      return reduce_typed<int64_t>(acc, in, count, op);
    case DType::bool_: {  // sum and max: or; min: and
      auto* a = static_cast<uint8_t*>(acc);
      const auto* b = static_cast<const uint8_t*>(in);
      for (int64_t i = 0; i < count; ++i)
        a[i] = op == ReduceOp::Min ? (a[i] && b[i]) : (a[i] || b[i]);
      return;
    }
  }
}

LT_VECTOR_CLONES void scale_in_place(void* data, int64_t count, DType dtype, double scale) {
  if (scale == 1) return;
  const auto s = static_cast<float>(scale);
  auto by = [&](auto c, auto* p) {  // p[i] = p[i] * c, computed in c's type
    for (int64_t i = 0; i < count; ++i)
      p[i] = static_cast<std::remove_reference_t<decltype(p[i])>>(decltype(c)(p[i]) * c);
  };
  switch (dtype) {
    case DType::float32:
      return by(s, static_cast<float*>(data));
    case DType::float64:
      return by(scale, static_cast<double*>(data));
    case DType::float16:
      return by(s, static_cast<Half*>(data));
    case DType::bfloat16:
      return by(s, static_cast<BFloat16*>(data));
    case DType::int32:
    case DType::int64:
    case DType::bool_:
      fail("scale_in_place", "a scale (", scale, ") needs a floating dtype, got ",
           dtype_name(dtype), ".");
  }
}

LT_VECTOR_CLONES void reduce_wide(const void* a, DType a_dtype, const void* b, DType dtype,
                                  int64_t count, ReduceOp op, void* out, DType out_dtype,
                                  float scale) {
  const bool a_wide = a_dtype == DType::float32, out_wide = out_dtype == DType::float32;
  if (!is_16bit_float(dtype) || !(a_wide || a_dtype == dtype) ||
      !(out_wide || out_dtype == dtype) || (out_wide && scale != 1))
    fail("reduce_wide", "sums 16-bit floats in float32, from float32 or ", dtype_name(dtype),
         " into float32 (unscaled) or ", dtype_name(dtype), "; got ", dtype_name(a_dtype), " + ",
         dtype_name(dtype), " into ", dtype_name(out_dtype), ".");
  if (dtype == DType::float16)
    return reduce_wide_as<Half>(a, a_wide, b, count, op, out, out_wide, scale);
  reduce_wide_as<BFloat16>(a, a_wide, b, count, op, out, out_wide, scale);
}

LT_VECTOR_CLONES void widen(const void* p, int64_t n, DType d, float* out) {
  if (d == DType::float16) return widen_typed(static_cast<const Half*>(p), n, out);
  widen_typed(static_cast<const BFloat16*>(p), n, out);
}

std::vector<float> widen(const void* p, int64_t n, DType d) {
  std::vector<float> f(static_cast<size_t>(n));
  widen(p, n, d, f.data());
  return f;
}

LT_VECTOR_CLONES void narrow(const float* f, int64_t n, void* p, DType d, float scale) {
  if (d == DType::float16) return narrow_typed(f, n, static_cast<Half*>(p), scale);
  narrow_typed(f, n, static_cast<BFloat16*>(p), scale);
}

void Communicator::check_same_collectives(uint64_t hash, std::string_view mine_text,
                                          std::string_view graph_name) {
  if (size() == 1) return;
  std::vector<int64_t> all(static_cast<size_t>(size()));
  const auto mine = static_cast<int64_t>(hash);
  try {
    gather_signatures(&mine, all.data());
  } catch (const Error& e) {
    fail("sync", "checking that every rank's graph issues the same collectives: ", e.what());
  }
  std::string differ;
  for (int r = 0; r < size(); ++r)
    if (all[static_cast<size_t>(r)] != all[0])
      differ += detail::cat(differ.empty() ? "" : ", ", "rank ", r, "'s ", std::hex,
                            static_cast<uint64_t>(all[static_cast<size_t>(r)]), std::dec);
  if (!differ.empty())
    fail("sync", "the ranks' graphs issue different collectives (signatures: rank 0's ", std::hex,
         static_cast<uint64_t>(all[0]), std::dec, ", ", differ, "; this is ", describe(),
         graph_name.empty() ? "" : ", graph '", graph_name, graph_name.empty() ? "" : "'",
         ", whose collectives are: ", mine_text,
         "). Every rank must issue the same collectives, on the same shapes and dtypes, in "
         "the same order; lt::debug::to_text shows a graph.");
}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int64_t CollectiveQueue::start(std::function<void()> work) {
  if (!threaded_) {
    work();
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = ++started_;
    return started_;
  }
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
    pending_.push_back(std::move(work));
    ticket = ++started_;
  }
  work_cv_.notify_one();
  return ticket;
}

void CollectiveQueue::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

void CollectiveQueue::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ == started_; });
  if (error_) std::rethrow_exception(error_);
}

void CollectiveQueue::reset() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ == started_; });
  error_ = nullptr;
}

void CollectiveQueue::serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    std::function<void()> work = std::move(pending_.front());
    pending_.pop_front();
    if (!error_) {
      lock.unlock();
      std::exception_ptr failed;
      try {
        work();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !error_) error_ = failed;
    }
    ++finished_;
    done_cv_.notify_all();
  }
}

uint64_t Communicator::overlap_key(uint64_t key) const {
  return can_overlap() ? key : hash_combine(key, 0x6e6f2d6f7665726cu);  // "no-overl"
}

CollectiveQueue& Communicator::queue() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (!queue_) queue_ = std::make_unique<CollectiveQueue>(can_overlap());
  return *queue_;
}

void Communicator::finish_started() {
  CollectiveQueue* q;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    q = queue_.get();
  }
  if (q) q->finish();
}

void SingleProcess::copy(const void* in, void* out, int64_t count, DType dtype) {
  if (in != out) std::memcpy(out, in, static_cast<size_t>(count) * itemsize(dtype));
}

Communicator& current_communicator() {
  if (t_comm) return *t_comm;
  if (Communicator* c = g_process.load(std::memory_order_acquire)) return *c;
  static auto* single = new SingleProcess();  // never destroyed, as above
  return *single;
}

void set_process_communicator(std::shared_ptr<Communicator> comm) {
  std::lock_guard<std::mutex> lock(g_process_mu);
  g_process.store(comm.get(), std::memory_order_release);
  g_process_owner = std::move(comm);
}

CommunicatorScope::CommunicatorScope(Communicator* comm) : previous_(t_comm) {
  t_comm = comm;
}

CommunicatorScope::~CommunicatorScope() {
  t_comm = previous_;
}

}  // namespace lazytrace::runtime
