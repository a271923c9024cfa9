#include "dist/mpi.h"

#include "lazytrace/core/error.h"

#if LAZYTRACE_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "lazytrace/dist/dist.h"
#endif

namespace lazytrace::dist {

#if LAZYTRACE_HAVE_MPI
namespace {

void check(int rc, const char* op, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(op, call, " failed: ", std::string(text, static_cast<size_t>(len)));
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::float32:
      return MPI_FLOAT;
    case DType::float64:
      return MPI_DOUBLE;
    case DType::int32:
      return MPI_INT32_T;
    case DType::int64:
      return MPI_INT64_T;
    case DType::float16:
    case DType::bfloat16:
      return MPI_UINT16_T;  // moved as bits; reduced in float32 (below)
    case DType::bool_:
      return MPI_C_BOOL;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(runtime::ReduceOp op, DType d) {
  if (d == DType::bool_) return op == runtime::ReduceOp::Min ? MPI_LAND : MPI_LOR;
  switch (op) {
    case runtime::ReduceOp::Sum:
      return MPI_SUM;
    case runtime::ReduceOp::Max:
      return MPI_MAX;
    case runtime::ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

int as_count(int64_t n, const char* op) {
  if (n > INT32_MAX) fail(op, "moves ", n, " elements at once; MPI takes at most 2^31 - 1.");
  return static_cast<int>(n);
}

class MpiWorld final : public runtime::Communicator {
 public:
  MpiWorld() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      // Collectives run on a thread beside the rank's computation (CollectiveQueue): an MPI
      // call that waits yields the core to the computation instead of spinning on it
      // (Open MPI's own setting, unless the user set it).
      setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "dist::init",
            "MPI_Init_thread");
      std::atexit([] {
        int done = 0;
        MPI_Finalized(&done);
        if (!done) MPI_Finalize();
      });
    }
    int level = MPI_THREAD_SINGLE;  // also where the caller initialized MPI itself
    MPI_Query_thread(&level);
    threads_ = level >= MPI_THREAD_SERIALIZED;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "dist::init", "MPI_Comm_dup");
    if (const char* e = std::getenv("LAZYTRACE_MPI_CHUNK_MB")) {
      char* end = nullptr;
      const double mb = std::strtod(e, &end);
      if (end == e || *end != '\0' || !(mb >= 0) || !std::isfinite(mb))
        fail("dist::init", "LAZYTRACE_MPI_CHUNK_MB must be a number of MiB (0: no chunks), got '",
             e, "'.");
      chunk_bytes_ = static_cast<int64_t>(mb * (1 << 20));
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return detail::cat("MPI rank ", rank_, " of ", size_); }
  bool can_overlap() const override { return threads_; }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype,
                  runtime::ReduceOp op) override {
    usable("all_reduce");
    if (runtime::is_16bit_float(dtype)) {
      std::vector<float> f = runtime::widen(in, count, dtype);
      all_reduce(f.data(), f.data(), count, DType::float32, op);
      return runtime::narrow(f, out, dtype);
    }
    // in chunks that stay in the caches (one stacked weight's gradient is tens of MiB)
    const auto item = static_cast<int64_t>(itemsize(dtype));
    const int64_t step = chunk_bytes_ > 0 ? std::max<int64_t>(chunk_bytes_ / item, 1) : count;
    for (int64_t at = 0; at < count; at += step)
      check(MPI_Allreduce(in == out ? MPI_IN_PLACE : static_cast<const char*>(in) + at * item,
                          static_cast<char*>(out) + at * item,
                          as_count(std::min(step, count - at), "all_reduce"), mpi_type(dtype),
                          mpi_op(op, dtype), MPI_COMM_WORLD),
            "all_reduce", "MPI_Allreduce");
  }

  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                      runtime::ReduceOp op) override {
    usable("reduce_scatter");
    if (runtime::is_16bit_float(dtype)) {
      std::vector<float> f = runtime::widen(in, count * size_, dtype),
                         o(static_cast<size_t>(count));
      reduce_scatter(f.data(), o.data(), count, DType::float32, op);
      return runtime::narrow(o, out, dtype);
    }
    // Pairwise exchange over point-to-point messages, in chunks: with N ranks, N - 1 rounds
    // in which each rank sends a peer its part of the peer's block and adds in what it
    // receives. Open MPI 4.1's MPI_Reduce_scatter_block mallocs and first-touches fresh
    // scratch on every call (docs/perf-log.md, issue 23); this keeps its scratch.
    const int n_rounds = size_ - 1;
    const auto item = static_cast<int64_t>(itemsize(dtype));
    const int64_t step =
        chunk_bytes_ > 0 ? std::max<int64_t>(chunk_bytes_ / (item * size_), 1) : count;
    const auto* from = static_cast<const char*>(in);
    auto* to = static_cast<char*>(out);
    if (n_rounds == 0) {
      if (to != from && count > 0) std::memcpy(to, from, static_cast<size_t>(count * item));
      return;
    }
    if (n_rounds > 1) scratch_.resize(static_cast<size_t>(std::min(step, count) * item));
    const MPI_Datatype type = mpi_type(dtype);
    const MPI_Op reduce = mpi_op(op, dtype);
    for (int64_t at = 0; at < count; at += step) {
      const int n = as_count(std::min(step, count - at), "reduce_scatter");
      const auto block = [&](int r) { return from + (r * count + at) * item; };
      for (int k = 1; k <= n_rounds; ++k) {
        const int dst = (rank_ + k) % size_, src = (rank_ - k + size_) % size_;
        // the first round receives into the output and adds this rank's own part
        void* recv = k == 1 ? static_cast<void*>(to + at * item) : scratch_.data();
        check(MPI_Sendrecv(block(dst), n, type, dst, kTag, recv, n, type, src, kTag, comm_,
                           MPI_STATUS_IGNORE),
              "reduce_scatter", "MPI_Sendrecv");
        check(MPI_Reduce_local(k == 1 ? block(rank_) : scratch_.data(), to + at * item, n, type,
                               reduce),
              "reduce_scatter", "MPI_Reduce_local");
      }
    }
  }

  void all_gather(const void* in, void* out, int64_t count, DType dtype) override {
    usable("all_gather");
    const int n = as_count(count, "all_gather");
    check(MPI_Allgather(in, n, mpi_type(dtype), out, n, mpi_type(dtype), MPI_COMM_WORLD),
          "all_gather", "MPI_Allgather");
  }

  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    usable("broadcast");
    check(MPI_Bcast(data, as_count(count, "broadcast"), mpi_type(dtype), root, MPI_COMM_WORLD),
          "broadcast", "MPI_Bcast");
  }

  // (into buffers of its own, which outlive a timeout: MPI may still write them)
  void gather_signatures(const int64_t* mine, int64_t* all) override {
    const char* op = "the check of the ranks' collectives";
    usable(op);
    signatures_.assign(static_cast<size_t>(size_) + 1, 0);
    signatures_[0] = *mine;
    MPI_Request req;
    check(MPI_Iallgather(signatures_.data(), 1, MPI_INT64_T, signatures_.data() + 1, 1, MPI_INT64_T,
                         MPI_COMM_WORLD, &req),
          op, "MPI_Iallgather");
    wait(req, op);
    std::copy(signatures_.begin() + 1, signatures_.end(), all);
  }

  void barrier() override {
    usable("barrier");
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier", "MPI_Ibarrier");
    wait(req, "barrier");
  }

 private:
  // Polls until the collective completes; lt::Error after lt::dist::timeout() seconds (a
  // rank stopped, or the ranks issue different collectives). Only barriers and the check of
  // the ranks' collective signatures (an all_gather of one int64, before a graph's first
  // run) wait this way: the data's collectives block in MPI, whose blocking algorithms are
  // faster than its non-blocking ones (docs/benchmarks.md, bench-dist), and the signature
  // check has made sure that every rank issues them.
  void wait(MPI_Request& req, const char* op) {
    const auto start = std::chrono::steady_clock::now();
    const double limit = timeout();
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), op, "MPI_Test");
      if (done) return;
      if (polls > 1000) std::this_thread::yield();
      if ((polls & 1023) == 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit) {
        failed_ = true;  // the request stays open: no later collective can pair up
        fail(op, describe(), " waited ", limit,
             " s for the other ranks (lt::dist::set_timeout, LAZYTRACE_DIST_TIMEOUT): a rank "
             "stopped, or the ranks issue different collectives.");
      }
    }
  }

  // After a timeout, every collective fails at once.
  void usable(const char* op) const {
    if (failed_)
      fail(op, describe(),
           ": an earlier collective timed out, and the ranks can no longer "
           "pair their collectives; end the job (mpirun ends the others when "
           "a rank exits with an error).");
  }

  int rank_ = 0, size_ = 1;
  bool threads_ = false;  // MPI may be called from a second thread (one at a time)
  bool failed_ = false;
  std::vector<int64_t> signatures_;
  std::vector<char> scratch_;      // reduce_scatter's receive buffer after its first round
  MPI_Comm comm_ = MPI_COMM_NULL;  // reduce_scatter's messages, apart from any of the user's
  static constexpr int kTag = 1;
  // bytes of `in` per all_reduce call or reduce_scatter chunk (LAZYTRACE_MPI_CHUNK_MB; 0:
  // no chunks)
  int64_t chunk_bytes_ = int64_t{4} << 20;
};

}  // namespace

bool mpi_built() {
  return true;
}

std::shared_ptr<runtime::Communicator> make_mpi_world() {
  return std::make_shared<MpiWorld>();
}

#else

bool mpi_built() {
  return false;
}

std::shared_ptr<runtime::Communicator> make_mpi_world() {
  fail("dist::init", "lazytrace was built without MPI.");
}

#endif

}  // namespace lazytrace::dist
