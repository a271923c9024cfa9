#pragma once
// What runs beside a scan's iterations: the loop (loop.cpp) tells it where each iteration
// starts and ends, and it decides what the other threads do meanwhile. make_loop_overlap
// picks an implementation; NoOverlap does nothing beside and runs the updates after.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"

namespace lazytrace::cpu {

/** Where slice `idx` of x input `in` lies in the caller's memory, and its bytes. */
std::pair<char*, int64_t> x_slice(const LoopStep::Input& in, const RunContext& caller, int64_t idx);

class LoopOverlap {
 public:
  virtual ~LoopOverlap() = default;
  virtual void iteration_start(int64_t j) = 0;
  virtual void iteration_done(int64_t j) = 0;
  /** After the last iteration: every update of the loop has run when it returns. */
  virtual void loop_done() = 0;
};

/** Nothing beside the loop: its updates (LoopStep::updates) run after the last iteration. */
class NoOverlap final : public LoopOverlap {
 public:
  NoOverlap(const LoopStep& s, const RunContext& caller) : s_(s), caller_(caller) {}
  void iteration_start(int64_t) override {}
  void iteration_done(int64_t) override {}
  void loop_done() override;

 private:
  const LoopStep& s_;
  const RunContext& caller_;
};

/**
 * The overlap for one run of scan `s`: the updates beside its iterations, or the next
 * iteration's slices read ahead (where the program's passes have read_ahead on), else
 * NoOverlap. `body` is the context the body's steps run in: the products there find the
 * read-ahead hints in it.
 */
std::unique_ptr<LoopOverlap> make_loop_overlap(const LoopStep& s, const RunContext& caller,
                                               RunContext& body);

}  // namespace lazytrace::cpu
