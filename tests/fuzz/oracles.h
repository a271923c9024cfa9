#pragma once
// The oracles: (a) lazytrace against the reference interpreter; (b) the same program with
// each optional pass switched off, against all passes on; (c) the same structure with new
// data: a cache hit, no compile, correct values; (d) gradients along a random direction
// against central differences of the reference in float64.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "program.h"
#include "reference.h"

namespace fuzz {

struct CheckOptions {
  std::set<char> oracles = {'a', 'b', 'c', 'd'};
  // (b): the passes to switch off one at a time (empty: every one), and "all" at once
  std::vector<std::string> passes;
  bool count_compiles = true;  // (c): check the counters (off when threads share them)
  // other threads draw random numbers at the same time: a run's draws are its own, so each
  // run is checked against the reference with its draws, not against another run's
  bool shared_random = false;
  std::string only;  // check only this failure key ("b:fusion"), for the shrinker
};

struct Failure {
  std::string key;   // "a", "b:<pass>", "c", "d", "exec"
  std::string what;  // what differs
};

struct Outcome {
  bool skipped = false;  // the reference found the program leaves a domain
  std::string skip_why;
  std::vector<Failure> failures;
  int checked_elements = 0;    // (a): elements compared with the reference
  int exact_elements = 0;      // of those, compared bit for bit
  int undecided_elements = 0;  // (a): left out (the reference could not decide them)
  bool kink = false;           // (d): the loss has a kink within the difference step: not checked
};

/** Where this thread's check_program is ("a", "c", "b:<pass>", "d"), for crash reports:
 * set the slot (a buffer of kStageSize chars) a thread's stages are written into. */
constexpr int kStageSize = 48;
void set_stage_slot(char* slot);

/** Runs the oracles on p (grad: also (d)); data from `seed`. */
Outcome check_program(const Program& p, bool grad, uint64_t seed, const CheckOptions& options);

/** Gives every Input node of p (bodies too) the data of `seed` as fixed values. */
void freeze_inputs(Program& p, uint64_t seed, bool smooth);

/** The tolerance of one element: 0 (bit-exact) or a multiple of the error estimate. */
double tolerance(const RTensor& t, size_t i);

/** The data for the (c) rerun: new values for every input, fixed or not. */
void fresh_inputs(const Program& p, uint64_t seed, bool smooth, DataSet& out);

/** p with its scalar literals moved (not to 0 or +-1), as the (c) rerun uses it. */
Program perturb_scalars(const Program& p, uint64_t seed);

/** The per-output loss weights and per-input directions of the gradient check. */
std::vector<std::vector<double>> loss_weights(const Program& p, uint64_t seed);

// the seeds the oracles derive from a program's seed
inline uint64_t data_seed(uint64_t seed) {
  return seed * 2 + 1;
}
inline uint64_t rerun_seed(uint64_t seed) {
  return seed * 2 + 2;
}

}  // namespace fuzz
