#include "dist/thread_group.h"

#include "lazytrace/dist/dist.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "lazytrace/core/error.h"

namespace lazytrace::dist {

// What a rank published for the collective under way.
struct Posted {
  const char* op = nullptr;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;
  DType dtype = DType::float32;
  int root = 0;
};

struct GroupState {
  int n = 0;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;  // barriers passed
  std::vector<Posted> posted;
  std::string failure;  // set: the group was aborted
};

namespace {

// Counts this rank in at the barrier (with g.mu held); true where it is the last, which
// opens the barrier for the others.
bool last_to_arrive(GroupState& g) {
  if (++g.arrived < g.n) return false;
  g.arrived = 0;
  ++g.generation;
  g.cv.notify_all();
  return true;
}

// The group's barrier: returns when all n ranks arrived, or throws when the group fails
// or the timeout passes (which fails the group for the others too).
void wait_all(GroupState& g, int rank, const char* op) {
  std::unique_lock<std::mutex> lock(g.mu);
  if (!g.failure.empty()) fail(op, g.failure);
  const uint64_t gen = g.generation;
  if (last_to_arrive(g)) return;
  const double seconds = timeout();  // read at each wait, as the MPI ranks do
  const auto limit = std::chrono::duration<double>(seconds);
  if (!g.cv.wait_for(lock, limit, [&] { return g.generation != gen || !g.failure.empty(); })) {
    g.failure = detail::cat("thread rank ", rank, " of ", g.n, " waited ", seconds,
                            " s for the others (lt::dist::set_timeout): a rank stopped, or the "
                            "ranks issue different collectives.");
    g.cv.notify_all();
  }
  if (g.generation == gen) fail(op, g.failure);
}

// The barrier that ends a collective: every rank passed its first barrier and reads the
// others' buffers, which reading cannot block, so each comes here (on its error paths too)
// and none leaves, and frees its buffers, while another still reads them: neither a timeout
// nor a failure of the group ends the wait.
void wait_all_read(GroupState& g) {
  std::unique_lock<std::mutex> lock(g.mu);
  const uint64_t gen = g.generation;
  if (last_to_arrive(g)) return;
  g.cv.wait(lock, [&] { return g.generation != gen; });
}

}  // namespace

ThreadRank::ThreadRank(std::shared_ptr<GroupState> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

int ThreadRank::size() const {
  return group_->n;
}

std::string ThreadRank::describe() const {
  return detail::cat("thread rank ", rank_, " of ", group_->n);
}

void ThreadRank::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(group_->mu);
  if (group_->failure.empty()) group_->failure = why;
  group_->cv.notify_all();
}

void ThreadRank::arrive(const char* op, const void* in, void* out, int64_t count, DType dtype,
                        int root) {
  group_->posted[static_cast<size_t>(rank_)] = {op, in, out, count, dtype, root};
  wait_all(*group_, rank_, op);
  for (int r = 0; r < group_->n; ++r) {
    const Posted& p = group_->posted[static_cast<size_t>(r)];
    const Posted& mine = group_->posted[static_cast<size_t>(rank_)];
    if (std::strcmp(p.op, op) != 0 || p.count != count || p.dtype != dtype || p.root != root) {
      const std::string why = detail::cat(
          "the ranks issue different collectives: rank ", rank_, " calls ", op, " of ", count, " ",
          dtype_name(dtype), " elements, rank ", r, " calls ", p.op, " of ", p.count, " ",
          dtype_name(p.dtype), " elements", mine.root != p.root ? " (roots differ)" : "",
          ". Every rank must issue the same collectives in the same order.");
      depart();  // no rank reads the others' buffers: each sees the mismatch
      fail(op, why);
    }
  }
}

void ThreadRank::depart() {
  wait_all_read(*group_);
}

void ThreadRank::reduce(const char* name, const void* in, void* out, int64_t count, DType dtype,
                        runtime::ReduceOp op, double scale, int block) {
  const size_t bytes = static_cast<size_t>(count) * itemsize(dtype);
  const size_t at = static_cast<size_t>(block) * bytes;
  // (made before arriving, the others may read only once all did; `out` may overlap `in`)
  std::vector<char> acc(bytes);
  arrive(name, in, out, count, dtype, 0);
  // every rank reduces in rank order, so every rank gets the same bits
  auto input = [&](int r) {
    return static_cast<const char*>(group_->posted[static_cast<size_t>(r)].in) + at;
  };
  // 16-bit floats summed in float32 and rounded once, as MPI's ranks do (one rank: scaled)
  if (runtime::is_16bit_float(dtype) && group_->n > 1) {
    std::vector<float> sum;
    try {  // (the widened sum may not fit in memory)
      sum.resize(static_cast<size_t>(count));
      for (int r = 1; r < group_->n; ++r)  // (the first round reads rank 0's part as it is)
        runtime::reduce_wide(r == 1 ? input(0) : static_cast<const void*>(sum.data()),
                             r == 1 ? dtype : DType::float32, input(r), dtype, count, op,
                             sum.data(), DType::float32);
    } catch (...) {
      depart();
      throw;
    }
    depart();
    return runtime::narrow(sum.data(), count, out, dtype, static_cast<float>(scale));
  }
  std::memcpy(acc.data(), input(0), bytes);
  for (int r = 1; r < group_->n; ++r) runtime::reduce_into(acc.data(), input(r), count, dtype, op);
  depart();
  runtime::scale_in_place(acc.data(), count, dtype, scale);
  std::memcpy(out, acc.data(), bytes);
}

void ThreadRank::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                            runtime::ReduceOp op, double scale) {
  reduce("all_reduce", in, out, count, dtype, op, scale, 0);
}

void ThreadRank::reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                                runtime::ReduceOp op, double scale) {
  reduce("reduce_scatter", in, out, count, dtype, op, scale, rank_);
}

void ThreadRank::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  const size_t bytes = static_cast<size_t>(count) * itemsize(dtype);
  std::vector<char> all(bytes * static_cast<size_t>(group_->n));
  arrive("all_gather", in, out, count, dtype, 0);
  for (int r = 0; r < group_->n; ++r)
    std::memcpy(all.data() + static_cast<size_t>(r) * bytes,
                group_->posted[static_cast<size_t>(r)].in, bytes);
  depart();
  std::memcpy(out, all.data(), all.size());
}

void ThreadRank::broadcast(void* data, int64_t count, DType dtype, int root) {
  arrive("broadcast", data, data, count, dtype, root);
  if (rank_ != root)
    std::memcpy(data, group_->posted[static_cast<size_t>(root)].in,
                static_cast<size_t>(count) * itemsize(dtype));
  depart();
}

void ThreadRank::barrier() {
  arrive("barrier", nullptr, nullptr, 0, DType::float32, 0);
  depart();
}

void ThreadRank::gather_signatures(const int64_t* mine, int64_t* all) {
  arrive("the check of the ranks' collectives", mine, all, 1, DType::int64, 0);
  for (int r = 0; r < group_->n; ++r)
    all[r] = *static_cast<const int64_t*>(group_->posted[static_cast<size_t>(r)].in);
  depart();
}

std::vector<std::unique_ptr<ThreadRank>> make_thread_group(int n) {
  auto g = std::make_shared<GroupState>();
  g->n = n;
  g->posted.resize(static_cast<size_t>(n));
  std::vector<std::unique_ptr<ThreadRank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<ThreadRank>(g, r));
  return ranks;
}

}  // namespace lazytrace::dist
