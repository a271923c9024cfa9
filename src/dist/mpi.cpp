#include "dist/mpi.h"

#include "lazytrace/core/error.h"

#if LAZYTRACE_HAVE_MPI
#include <mpi.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lazytrace/dist/dist.h"
#include "runtime/exit_gate.h"
#include "runtime/thread_pool.h"
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
      // Collectives may run on a thread beside the rank's computation (CollectiveQueue): an
      // MPI call that waits yields the core to the computation instead of spinning on it
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
      runtime::close_runs_at_exit();  // runs first: no thread's collective under MPI_Finalize
    }
    int level = MPI_THREAD_SINGLE;  // also where the caller initialized MPI itself
    MPI_Query_thread(&level);
    threads_ = level >= MPI_THREAD_SERIALIZED;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "dist::init", "MPI_Comm_dup");
    // LAZYTRACE_MPI_OVERLAP, read before the collectives below and rejected after them, so
    // that every rank takes part in those before one fails
    const char* overlap_env = std::getenv("LAZYTRACE_MPI_OVERLAP");
    const std::string overlap = overlap_env ? overlap_env : "auto";
    const bool overlap_known = overlap == "auto" || overlap == "on" || overlap == "off";
    overlap_ = agreed_overlap(overlap == "on" ? 1 : overlap == "off" ? 0 : -1);
    if (!overlap_known)
      fail("dist::init", "LAZYTRACE_MPI_OVERLAP must be 'auto' (the default), 'on' or 'off', got '",
           overlap, "'.");
    if (const char* e = std::getenv("LAZYTRACE_MPI_CHUNK_MB")) {
      char* end = nullptr;
      const double mb = std::strtod(e, &end);
      if (end == e || *end != '\0' || !(mb >= 0) || !std::isfinite(mb))
        fail("dist::init", "LAZYTRACE_MPI_CHUNK_MB must be a number of MiB (0: no chunks), got '",
             e, "'.");
      chunk_bytes_ = static_cast<int64_t>(mb * (1 << 20));
    }
    if (const char* e = std::getenv("LAZYTRACE_MPI_ALL_REDUCE")) {
      if (std::strcmp(e, "mpi") != 0 && std::strcmp(e, "pairwise") != 0)
        fail("dist::init", "LAZYTRACE_MPI_ALL_REDUCE must be 'pairwise' (the default) or 'mpi' ",
             "(MPI_Allreduce), got '", e, "'.");
      pairwise_all_reduce_ = std::strcmp(e, "pairwise") == 0;
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return detail::cat("MPI rank ", rank_, " of ", size_); }
  bool can_overlap() const override { return overlap_; }

  // Whether collectives overlap the computation, started early on the queue's own thread:
  // where MPI may be called from that thread, and `setting` (1 on, 0 off, -1 auto) says so
  // or, by default, where it gains: where a rank is on another machine (a network to wait
  // on), or where this machine's logical CPUs (the union of its ranks' CPU sets) leave one
  // free for each rank's queue thread beside its computation threads. Ranks on one machine
  // exchange through memory with their own CPU time; where their threads already fill the
  // CPUs, a queue thread only takes turns with the computation, and exchanges started early
  // add waits for the other ranks (the overlap_collectives pass then leaves the collectives
  // where the graph has them). Every rank takes the least of the ranks' answers, so that
  // their programs, and the collectives' signatures they compare, agree.
  bool agreed_overlap(int setting) {
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
          "dist::init", "MPI_Comm_split_type");
    int node_size = 1;
    MPI_Comm_size(node, &node_size);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof cpus, &cpus) != 0)
      for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c)
        CPU_SET(c, &cpus);
    int wanted = runtime::num_threads() + 1;  // computation threads and a queue thread
    const int rc_cpus =
        MPI_Allreduce(MPI_IN_PLACE, &cpus, static_cast<int>(sizeof cpus), MPI_BYTE, MPI_BOR, node);
    const int rc_wanted = MPI_Allreduce(MPI_IN_PLACE, &wanted, 1, MPI_INT, MPI_SUM, node);
    MPI_Comm_free(&node);
    check(rc_cpus, "dist::init", "MPI_Allreduce");
    check(rc_wanted, "dist::init", "MPI_Allreduce");
    const bool gains = node_size < size_ || wanted <= CPU_COUNT(&cpus);
    int mine = threads_ && (setting == 1 || (setting == -1 && gains));
    check(MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "dist::init",
          "MPI_Allreduce");
    return mine != 0;
  }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype, runtime::ReduceOp op,
                  double scale) override {
    usable("all_reduce");
    if (runtime::is_16bit_float(dtype) && !pairwise_all_reduce_) {  // MPI sums no 16-bit floats
      std::vector<float> f = runtime::widen(in, count, dtype);
      all_reduce(f.data(), f.data(), count, DType::float32, op, scale);
      return runtime::narrow(f.data(), count, out, dtype);
    }
    // in chunks that stay in the caches (one stacked weight's gradient is tens of MiB)
    const auto item = static_cast<int64_t>(itemsize(dtype));
    const int64_t step = chunk_bytes_ > 0 ? std::max<int64_t>(chunk_bytes_ / item, 1) : count;
    const auto* from = static_cast<const char*>(in);
    auto* to = static_cast<char*>(out);
    const MPI_Datatype type = mpi_type(dtype);
    for (int64_t at = 0; at < count; at += step) {
      const int64_t n = std::min(step, count - at);
      if (!pairwise_all_reduce_) {
        check(MPI_Allreduce(in == out ? MPI_IN_PLACE : from + at * item, to + at * item,
                            as_count(n, "all_reduce"), type, mpi_op(op, dtype), MPI_COMM_WORLD),
              "all_reduce", "MPI_Allreduce");
        runtime::scale_in_place(to + at * item, n, dtype, scale);  // while in the caches
        continue;
      }
      // the chunk in segments of whole cache lines, one per rank: each rank reduces its
      // segment, then sends it to every other
      const int64_t line = std::max<int64_t>(64 / item, 1);
      const auto begin = [&](int r) { return r == size_ ? n : n * r / size_ / line * line; };
      const auto segment = [&](int r) {
        return Part{from + (at + begin(r)) * item, begin(r + 1) - begin(r)};
      };
      char* mine = to + (at + begin(rank_)) * item;
      reduce_rounds(segment, mine, dtype, op, scale, "all_reduce");
      gather_rounds(
          mine, [&](int r) { return to + (at + begin(r)) * item; },
          [&](int r) { return segment(r).count; }, dtype, "all_reduce");
    }
  }

  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, runtime::ReduceOp op,
                      double scale) override {
    usable("reduce_scatter");
    // in chunks of every block
    const auto item = static_cast<int64_t>(itemsize(dtype));
    const int64_t step =
        chunk_bytes_ > 0 ? std::max<int64_t>(chunk_bytes_ / (item * size_), 1) : count;
    const auto* from = static_cast<const char*>(in);
    auto* to = static_cast<char*>(out);
    for (int64_t at = 0; at < count; at += step) {
      const int64_t n = std::min(step, count - at);
      reduce_rounds(
          [&](int r) {
            return Part{from + (r * count + at) * item, n};
          },
          to + at * item, dtype, op, scale, "reduce_scatter");
    }
  }

  void all_gather(const void* in, void* out, int64_t count, DType dtype) override {
    usable("all_gather");
    // pairwise, as all_reduce's second half: MPI_Allgather takes fresh scratch every call
    const auto bytes = count * static_cast<int64_t>(itemsize(dtype));
    auto* to = static_cast<char*>(out);
    if (bytes > 0 && in != to + rank_ * bytes)
      std::memmove(to + rank_ * bytes, in, static_cast<size_t>(bytes));
    gather_rounds(
        to + rank_ * bytes, [&](int r) { return to + r * bytes; }, [&](int) { return count; },
        dtype, "all_gather");
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
  // This rank's part of rank r's segment of an exchange: `count` elements at `data`.
  struct Part {
    const char* data;
    int64_t count;
  };

  // Reduces every rank's part of this rank's segment into `out` (which may be this rank's
  // own part), scaled, by pairwise exchange over point-to-point messages: with N ranks, N - 1
  // rounds in which each rank sends a peer its part of the peer's segment, `part(peer)`, and
  // adds in what it receives. Open MPI 4.1's collectives malloc and first-touch fresh
  // scratch on every call (docs/perf-log.md, issue 23); this keeps its scratch. 16-bit
  // floats travel as they are and are summed in float32, rounded once at the end.
  template <typename PartOf>
  void reduce_rounds(PartOf part, char* out, DType dtype, runtime::ReduceOp op, double scale,
                     const char* name) {
    const Part own = part(rank_);
    const auto n = static_cast<size_t>(own.count);
    const size_t bytes = n * itemsize(dtype);
    const bool in_place = own.data == out, wide = runtime::is_16bit_float(dtype);
    if (size_ == 1) {  // nothing to exchange: the part scaled (16-bit floats in float32)
      if (!in_place && bytes > 0) std::memcpy(out, own.data, bytes);
      return runtime::scale_in_place(out, own.count, dtype, scale);
    }
    if (wide && size_ > 2) sum_.resize(n);  // (2 ranks sum in one round, from and into 16 bits)
    const MPI_Datatype type = mpi_type(dtype);
    for (int k = 1; k < size_; ++k) {
      const int dst = (rank_ + k) % size_, src = (rank_ - k + size_) % size_;
      const Part theirs = part(dst);
      // the first round receives into the output and adds this rank's own part
      const bool direct = k == 1 && !in_place && !wide;
      if (!direct) scratch_.resize(bytes);
      void* recv = direct ? static_cast<void*>(out) : scratch_.data();
      check(MPI_Sendrecv(theirs.data, as_count(theirs.count, name), type, dst, kTag, recv,
                         as_count(own.count, name), type, src, kTag, comm_, MPI_STATUS_IGNORE),
            name, "MPI_Sendrecv");
      if (wide) {  // the first round reads this rank's part as it is, the last writes `out`
        const bool first = k == 1, last = k == size_ - 1;
        runtime::reduce_wide(first ? own.data : static_cast<const void*>(sum_.data()),
                             first ? dtype : DType::float32, scratch_.data(), dtype, own.count, op,
                             last ? static_cast<void*>(out) : sum_.data(),
                             last ? dtype : DType::float32, last ? static_cast<float>(scale) : 1);
      } else {
        runtime::reduce_into(out, direct ? own.data : scratch_.data(), own.count, dtype, op);
      }
    }
    if (!wide) runtime::scale_in_place(out, own.count, dtype, scale);  // in the caches
  }

  // Sends this rank's `mine` (count_of(rank_) elements) to every other rank and receives
  // rank r's count_of(r) into at(r), over point-to-point messages: with N ranks, N - 1
  // rounds, in each of which every rank sends to one peer and receives from another.
  template <typename At, typename CountOf>
  void gather_rounds(const char* mine, At at, CountOf count_of, DType dtype, const char* name) {
    const MPI_Datatype type = mpi_type(dtype);
    for (int k = 1; k < size_; ++k) {
      const int dst = (rank_ + k) % size_, src = (rank_ - k + size_) % size_;
      check(MPI_Sendrecv(mine, as_count(count_of(rank_), name), type, dst, kTag, at(src),
                         as_count(count_of(src), name), type, src, kTag, comm_, MPI_STATUS_IGNORE),
            name, "MPI_Sendrecv");
    }
  }

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
  bool overlap_ = true;   // agreed_overlap()
  bool failed_ = false;
  std::vector<int64_t> signatures_;
  std::vector<char> scratch_;      // reduce_rounds' receive buffer where it cannot use `out`
  std::vector<float> sum_;         // reduce_rounds' float32 sum of 16-bit floats
  MPI_Comm comm_ = MPI_COMM_NULL;  // the exchanges' messages, apart from any of the user's
  static constexpr int kTag = 1;
  // bytes of `in` per all_reduce or reduce_scatter chunk (LAZYTRACE_MPI_CHUNK_MB; 0: no
  // chunks)
  int64_t chunk_bytes_ = int64_t{4} << 20;
  // all_reduce as a pairwise reduce-scatter and all-gather of each chunk, not
  // MPI_Allreduce (LAZYTRACE_MPI_ALL_REDUCE=mpi)
  bool pairwise_all_reduce_ = true;
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
