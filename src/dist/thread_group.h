#pragma once
// Threads as ranks: n communicators over shared memory, one per thread of one process.
#include <memory>
#include <vector>

#include "runtime/communicator.h"

namespace lazytrace::dist {

struct GroupState;

/** One rank of a group of threads; made by make_thread_group. */
class ThreadRank final : public runtime::Communicator {
 public:
  ThreadRank(std::shared_ptr<GroupState> group, int rank);
  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce(const void* in, void* out, int64_t count, DType dtype, runtime::ReduceOp op,
                  double scale) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, runtime::ReduceOp op,
                      double scale) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void barrier() override;
  std::string describe() const override;
  int cache_slot() const override { return rank_ + 1; }
  /** Fails every rank's waiting and later collectives with `why` (a rank threw). */
  void abort(const std::string& why);

 private:
  void gather_signatures(const int64_t* mine, int64_t* all) override;
  // Publishes this rank's buffers and waits for every rank's; checks they agree.
  void arrive(const char* op, const void* in, void* out, int64_t count, DType dtype, int root);
  // Waits until every rank has finished reading the others' buffers.
  void depart();
  // Block `block` (of `count` elements) of the ranks' inputs, reduced in rank order and
  // scaled, to `out`.
  void reduce(const char* name, const void* in, void* out, int64_t count, DType dtype,
              runtime::ReduceOp op, double scale, int block);

  std::shared_ptr<GroupState> group_;
  int rank_;
};

/** The n ranks of a new group; a wait fails after lt::dist::timeout() seconds. */
std::vector<std::unique_ptr<ThreadRank>> make_thread_group(int n);

}  // namespace lazytrace::dist
