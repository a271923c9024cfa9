#pragma once
// What runs beside a scan's iterations: the loop (loop.cpp) tells it where each iteration
// starts and ends, and it decides what the other threads do meanwhile. make_loop_overlap
// picks an implementation; NoOverlap does nothing beside and runs the updates after.
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"

namespace lazytrace::cpu {

/** Where slice `idx` of x input `in` lies in the caller's memory, and its bytes. */
std::pair<char*, int64_t> x_slice(const LoopStep::Input& in, const RunContext& caller, int64_t idx);

/**
 * Whether a loop reads its next iteration's slices ahead (pass read_ahead), per loop (its
 * length, slice bytes, body and threads): its first runs go both ways in turn, timed from
 * the first iteration to the last; after kTimed runs each way (each way's first run not
 * counted: cold caches) the way with the faster best run is kept. The reads change no value,
 * only what the other threads do meanwhile, and which way wins differs by machine.
 */
class ReadAheadChoice {
 public:
  static constexpr int kTimed = 3;
  struct Key {
    int64_t length, slice_bytes, body_steps, threads;
    bool operator==(const Key&) const = default;
  };
  /** Whether the next run of `key` reads ahead; `timed` is set while it is still on trial. */
  bool ahead(const Key& key, bool& timed);
  void record(const Key& key, bool ahead, int64_t ns);

 private:
  struct Entry {
    Key key;
    int runs[2] = {0, 0};  // [ahead]
    int64_t best[2] = {INT64_MAX, INT64_MAX};
    int kept = -1;  // the way kept, once decided
  };
  Entry& entry(const Key& key);  // with mu_ held
  std::mutex mu_;
  std::vector<Entry> entries_;  // few: one per loop of the programs run
};

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
