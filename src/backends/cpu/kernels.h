#pragma once
// The CPU kernels, one per step kind of a lowered Program.
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/program.h"
#include "runtime/device.h"

namespace lazytrace::cpu {

class TimedChoice;  // timed_choice.h

/** The device's choices made by timing on the machine at hand; each null with its pass off. */
struct Choices {
  GemmChoice* gemm = nullptr;         // a product's kernel (gemm.h; pass gemm_choice)
  TimedChoice* read_ahead = nullptr;  // a loop's read-ahead (pass read_ahead_choice)
};

/** What a step needs at run time: a base pointer per storage, and the scalar values. */
struct RunContext {
  std::vector<char*> base;
  const std::vector<runtime::ScalarArg>* scalars = nullptr;
  runtime::PassSet passes;  // the program's: the backend's optional passes read them
  // Hints a loop gives the products of its body (loop_overlap.cpp): the stream the thread
  // that runs a step reads ahead (only that thread: it is not shared with the parts of a
  // product that other threads run), and the shadows every thread's products read ahead.
  ReadAhead* read_ahead = nullptr;
  Shadows shadows;
  Choices choices;
  // The communicator collectives run through (the thread's current one when the run began).
  runtime::Communicator* comm = nullptr;
  // The run's tickets of the collectives started ahead of their waits (Program::num_tickets).
  int64_t* tickets = nullptr;

  runtime::ScalarArg scalar(const View& v) const {
    if (v.scalar_slot >= 0) return (*scalars)[v.scalar_slot];
    return {v.value, v.ivalue};
  }
};

void run_fused(const FusedStep& s, const RunContext& ctx);
void run_collective(const CollectiveStep& s, const RunContext& ctx);
/** Starts a loop's collectives (LoopStep::collectives): the parts made before the loop
 * (slice < 0), or the parts that slice `slice` completes. */
void start_loop_collectives(const LoopStep& s, const RunContext& ctx, int64_t slice);
void run_reduce(const ReduceStep& s, const RunContext& ctx);
void run_matmul(const MatmulStep& s, const RunContext& ctx);
/** Two products that may run at the same time (MatmulStep::beside_next), in either order. */
void run_matmuls(const MatmulStep& a, const MatmulStep& b, const RunContext& ctx);
/**
 * Rows [r0, r0 + rows) of batch `bi` of a float32 product, into `out` (row stride n); with
 * `ahead`, the memory the caller reads next is prefetched while it runs (small_gemm.h).
 */
void matmul_rows_f32(const MatmulStep& s, int64_t bi, int64_t r0, int64_t rows, float* out,
                     const RunContext& ctx, ReadAhead* ahead = nullptr);
void run_gather(const GatherStep& s, const RunContext& ctx);
void run_check(const CheckStep& s, const RunContext& ctx);
void run_adamw(const AdamWStep& s, const RunContext& ctx);
/**
 * An AdamW update whose gradient is a product (AdamWStep::grad_product) in parts: block b
 * of batch bi, of adamw_blocks_per_batch(s) per batch. run_adamw does them all.
 */
int64_t adamw_blocks_per_batch(const AdamWStep& s);
void run_adamw_block(const AdamWStep& s, const RunContext& ctx, int64_t bi, int64_t b);
/** A scan or while loop: its body's program run per iteration (loop.cpp). */
void run_loop(const LoopStep& s, const RunContext& ctx);
/** The steps of a program from `first` on, in order. */
void run_steps(const Program& prog, const RunContext& ctx, size_t first = 0);

}  // namespace lazytrace::cpu
