#pragma once
// The reference interpreter: plain float64 loops over the program representation (none of
// lazytrace's kernels). Each node's values are rounded to its dtype the way lazytrace
// documents it (16-bit floats computed in float32 and rounded per op, integers exact, casts
// as static_cast). Alongside each value it carries an estimate of how far lazytrace's value
// may lie from it (first-order error propagation: zero where the reference reproduces
// lazytrace's arithmetic exactly, e.g. +, -, *, / and sqrt in float32, integers, layouts),
// and a flag for values it cannot decide (a comparison or a cast to an integer whose
// operands lie within that error of the boundary).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "program.h"

namespace fuzz {

struct RTensor {
  DType dtype = DType::float32;
  Dims shape;
  std::vector<double> v;   // values
  std::vector<double> e;   // error estimate (absolute) of lazytrace's value
  std::vector<uint8_t> u;  // 1: undecidable here (skipped by the checks)
  int64_t size() const { return static_cast<int64_t>(v.size()); }
};

/** Values that come from outside the program: inputs and the random draws of one run. */
struct DataSet {
  std::map<const Node*, std::vector<double>> inputs;
  std::map<const Node*, std::vector<double>> random;  // read back from the lazytrace run
};

/**
 * The values of every Input node (top level and bodies) of p for a data seed, in their
 * dtype's precision. `smooth`: continuous values only (no repeated round numbers), for the
 * gradient check. Inputs with fixed data keep it unless also_fixed.
 */
void make_inputs(const Program& p, uint64_t data_seed, bool smooth, DataSet& out,
                 bool also_fixed = false);

struct RefResult {
  bool ok = true;  // false: the program left a domain (a NaN, an overflow, an index)
  std::string why;
  std::vector<RTensor> nodes;                 // every top-level node (multi nodes: empty)
  std::vector<std::vector<RTensor>> results;  // multi nodes: their results
};

/** Runs p. round = false: every value in plain float64 (no rounding, no error estimates). */
RefResult run_reference(const Program& p, const DataSet& data, bool round = true);

/** The gradient oracle's loss: sum over the floating outputs k of output k times w[k]. */
double weighted_sum(const Program& p, const RefResult& r,
                    const std::vector<std::vector<double>>& w);

/** Rounds a double to what dtype d holds, as lazytrace converts (via float for 16-bit). */
double round_to(DType d, double v);

}  // namespace fuzz
