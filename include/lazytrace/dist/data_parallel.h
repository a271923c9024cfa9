#pragma once
/**
 * Data parallelism for a module, like PyTorch's DistributedDataParallel: every rank holds
 * the whole model, runs the step on its slice of the global batch (lt::dist::shard), and
 * the ranks' gradients are averaged with all-reduces before the optimizer step:
 *
 *   lt::dist::init();                      // under mpirun: MPI; else one process
 *   lt::dist::DataParallel dp(*model);     // rank 0's initial weights on every rank
 *   auto step = lt::compile([&](const lt::Tensor& x, const lt::Tensor& y) {
 *     lt::Tensor loss = lt::nn::cross_entropy((*model)(x), y);
 *     loss.backward();
 *     dp.all_reduce_gradients();           // recorded into the step: one graph
 *     opt.step();
 *     opt.zero_grad();
 *     return dp.average(loss);
 *   });
 */
#include <cstdint>
#include <string>
#include <vector>

#include "lazytrace/nn/module.h"

namespace lazytrace::dist {

struct DataParallelOptions {
  /** Gradients all-reduced together, in reverse parameter order (the order backward makes
   * them), up to this many bytes per all-reduce. 4 MiB: on a CPU, reductions of buckets that
   * stay in the caches run up to 2.5x faster than PyTorch DDP's 25 MiB (docs/benchmarks.md). */
  int64_t bucket_bytes = int64_t{4} << 20;
  /** Gradients averaged over the ranks (the 1/N scale folded into the reduction), so a step
   * on N ranks is the step on their N batches together; false: summed. */
  bool average = true;
  /** Broadcast rank 0's parameters and buffers when made, so every rank starts equal. */
  bool broadcast_parameters = true;
};

class DataParallel {
 public:
  explicit DataParallel(nn::Module& module, DataParallelOptions options = {});

  /** Every rank's parameters and buffers become rank 0's (recorded; runs at the next sync). */
  void broadcast_parameters();
  /**
   * After backward: each parameter's grad() becomes the mean (or sum) over the ranks,
   * recorded lazily, so inside lt::compile the all-reduces are part of the step's graph.
   * Parameters without a gradient are skipped (every rank must agree on which).
   */
  void all_reduce_gradients();
  /** The mean over ranks of a value (e.g. the loss, for the log): all_reduce(t, "mean"). */
  Tensor average(const Tensor& t) const;

  /** The buckets of the last all_reduce_gradients, as parameter names, in the order run. */
  const std::vector<std::vector<std::string>>& buckets() const { return buckets_; }
  nn::Module& module() { return module_; }

 private:
  nn::Module& module_;
  DataParallelOptions options_;
  std::vector<std::vector<std::string>> buckets_;
};

}  // namespace lazytrace::dist
