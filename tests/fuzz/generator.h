#pragma once
// The random program generator: seeded and deterministic (std::mt19937_64), small sizes,
// inputs and wrappers chosen so that no op leaves its domain.
#include <cstdint>
#include <set>
#include <string>

#include "program.h"

namespace fuzz {

struct GenOptions {
  int min_ops = 5;
  int max_ops = 60;
  // -1: decided by the seed (about a third of the programs); 0 / 1: never / always a
  // program for the gradient oracle (float32/float64, differentiable ops only)
  int grad = -1;
  // op families left out (--ops-without): unary, binary, compare, where, cast, reshape,
  // transpose, permute, broadcast, slice, select, squeeze, concat, stack, index_select,
  // index_add, sum, mean, amax, softmax, matmul, random, arange, full, scan, fori, while,
  // pure, materialize (tensors synced early), reuse (repeated subexpressions)
  std::set<std::string> without;
};

struct Generated {
  Program program;
  bool grad = false;  // a program for the gradient oracle
};

/** The program of one seed. */
Generated generate(uint64_t seed, const GenOptions& options);

/** The op family names GenOptions::without accepts. */
const std::set<std::string>& family_names();

}  // namespace fuzz
