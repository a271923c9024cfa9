#pragma once
// The communicator: how the ranks of a data-parallel job exchange buffers. Collective ops
// (ir ops all_reduce, reduce_scatter, all_gather, broadcast) run through the communicator
// current on the thread that runs the graph; every rank issues the same collectives in the
// same order. This layer holds the interface and the single process (size 1); dist/ holds
// the others (threads as ranks, MPI).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lazytrace/core/dtype.h"

namespace lazytrace::runtime {

enum class ReduceOp : uint8_t { Sum, Max, Min };

/** "sum", "max", "min". */
const char* reduce_op_name(ReduceOp op);

/** `data[i] *= scale` over `count` elements of a floating dtype (in float32 for the 16-bit
 * ones); nothing where scale is 1. */
void scale_in_place(void* data, int64_t count, DType dtype, double scale);

/**
 * A rank's collectives that run beside its computation (the CPU backend's
 * overlap_collectives pass): a thread of their own runs them one at a time, in the order
 * they were started, which is the order every rank starts them in. A collective run on the
 * caller's thread waits for the started ones first (Communicator::finish_started), so the
 * order holds there too.
 */
class CollectiveQueue {
 public:
  /** threaded = false: start() runs the work at once on the caller's thread (a transport
   * that may not be called from a second thread). */
  explicit CollectiveQueue(bool threaded) : threaded_(threaded) {}
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;
  /** Joins the thread; work still queued is dropped (every run waits for its own). */
  ~CollectiveQueue();
  /** Queues `work`; returns its ticket (1, 2, ... in the order started). */
  int64_t start(std::function<void()> work);
  /**
   * Waits until the work of `ticket` and of every ticket before it has run; rethrows the
   * first error among them. After an error the rest of the queue is not run (the ranks'
   * collectives are out of step): wait rethrows it until reset().
   */
  void wait(int64_t ticket);
  /** wait() for everything started. */
  void finish();
  /** Waits for everything started, then forgets any error (a failed run's clean-up). */
  void reset();

 private:
  void serve();
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> pending_;
  int64_t started_ = 0, finished_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  const bool threaded_;
  std::thread thread_;  // started by the first start()
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /**
   * `in`: `count` elements on every rank; `out` (which may be `in`): their reduction times
   * `scale` (floating dtypes; 1 otherwise), scaled as each part is reduced rather than in a
   * pass of its own (a mean's 1/N folded in).
   */
  virtual void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                          double scale) = 0;
  /** `in`: size() blocks of `count` elements; `out`: block rank() of their reduction times
   * `scale`, as all_reduce. */
  virtual void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                              double scale) = 0;
  /** `in`: `count` elements; `out`: size() blocks, block r from rank r. */
  virtual void all_gather(const void* in, void* out, int64_t count, DType dtype) = 0;
  /** In place: every rank's `data` becomes rank `root`'s. */
  virtual void broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  virtual void barrier() = 0;
  /** "single process", "thread rank 1 of 4", "MPI rank 0 of 2". */
  virtual std::string describe() const = 0;
  /**
   * Ranks that share a process (threads as ranks) each need their own executables, since
   * an executable runs one call at a time and a rank waits inside it for the others: the
   * slot goes into the compile cache's key (never into a graph's hash).
   */
  virtual int cache_slot() const { return 0; }
  /** Whether this communicator's collectives may overlap the computation, on its queue's
   * own thread (MPI: where it was initialized with MPI_THREAD_SERIALIZED or more, and that
   * thread has a network to wait on or a core to run on). Where not, the overlap_collectives
   * pass leaves the collectives where the graph has them, each run in place. */
  virtual bool can_overlap() const { return true; }
  /** A compiled program's cache key `key`, told apart where can_overlap() is false (the
   * program's collectives then stay where its graph has them). */
  uint64_t overlap_key(uint64_t key) const;

  /**
   * Checks, before a run of a graph whose collectives have signature `collectives`
   * (Executable::collectives), that every rank's graph issues the same ones (one int64
   * gathered from each rank); lt::Error on every rank otherwise, naming the ranks that differ
   * and this rank's collectives (`mine`), instead of a hang or garbage in mismatched
   * collectives. The rest of the graphs may differ (e.g. each rank slicing its part of a
   * batch).
   */
  void check_same_collectives(uint64_t collectives, std::string_view mine,
                              std::string_view graph_name);

  /** This rank's queue of collectives that run beside the computation (made at first use;
   * its thread runs this communicator's started collectives, or where can_overlap() is
   * false, start() runs each in place). */
  CollectiveQueue& queue();
  /** Waits for the collectives started on the queue, if any (before a collective runs on
   * the caller's thread); rethrows their error. */
  void finish_started();

 protected:
  /** One int64 from every rank, for check_same_collectives (all_gather; MPI waits for it
   * with lt::dist's timeout). */
  virtual void gather_signatures(const int64_t* mine, int64_t* all) {
    all_gather(mine, all, 1, DType::int64);
  }

 private:
  std::mutex queue_mu_;  // not std::call_once, whose thread_local the library's TLS model
                         // cannot link
  // Its thread is joined after the derived communicator is gone: every run has waited for
  // its collectives by then, and what is still queued is dropped, never run.
  std::unique_ptr<CollectiveQueue> queue_;
};

/** The single process: size 1, every collective an identity. */
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp,
                  double scale) override {
    copy(in, out, count, dtype);
    scale_in_place(out, count, dtype, scale);
  }
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp,
                      double scale) override {
    copy(in, out, count, dtype);
    scale_in_place(out, count, dtype, scale);
  }
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override {
    copy(in, out, count, dtype);
  }
  void broadcast(void*, int64_t, DType, int) override {}
  void barrier() override {}
  std::string describe() const override { return "single process"; }

 private:
  static void copy(const void* in, void* out, int64_t count, DType dtype);
};

/**
 * The communicator collectives run through on this thread: the thread's own (set by
 * CommunicatorScope, e.g. a thread rank's), else the process's (set_process_communicator,
 * e.g. MPI's), else the single process.
 */
Communicator& current_communicator();
/** The process's communicator, for every thread without its own; null: the single process. */
void set_process_communicator(std::shared_ptr<Communicator> comm);

/** Sets this thread's communicator for its lifetime (not owned), restoring the previous. */
class CommunicatorScope {
 public:
  explicit CommunicatorScope(Communicator* comm);
  ~CommunicatorScope();
  CommunicatorScope(const CommunicatorScope&) = delete;
  CommunicatorScope& operator=(const CommunicatorScope&) = delete;

 private:
  Communicator* previous_;
};

/** Elementwise `acc[i] = op(acc[i], in[i])` over `count` elements of dtype (not a 16-bit
 * float: those are summed in float32, reduce_wide). */
void reduce_into(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op);
/** float16 and bfloat16: reduced in float32 and rounded once, by every communicator. */
inline bool is_16bit_float(DType d) {
  return d == DType::float16 || d == DType::bfloat16;
}
/** Elementwise `out[i] = op(a[i], b[i])` in float32, `b` 16-bit floats of dtype and `a`
 * float32 or dtype (a_dtype), in one pass; `out` float32, or dtype (out_dtype) times `scale`
 * and rounded to nearest even. `out` may be `a`. (An exchange's first round reads its own
 * part as it is; its last writes the result.) */
void reduce_wide(const void* a, DType a_dtype, const void* b, DType dtype, int64_t count,
                 ReduceOp op, void* out, DType out_dtype, float scale = 1);
/** `n` 16-bit floats as float32, and back (times `scale` first, rounded to nearest even). */
std::vector<float> widen(const void* p, int64_t n, DType d);
void widen(const void* p, int64_t n, DType d, float* out);
void narrow(const float* f, int64_t n, void* p, DType d, float scale = 1);

}  // namespace lazytrace::runtime
