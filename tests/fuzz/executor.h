#pragma once
// Runs a program through lazytrace's public API.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "program.h"
#include "reference.h"

namespace fuzz {

struct ExecOptions {
  bool release_inputs = true;  // drop the inputs' handles before the sync (donation may act)
  bool sync_all = false;       // lt::sync() instead of lt::sync(outputs)
  uint64_t random_seed = 1;    // lt::manual_seed before building
  // gradient: float32/float64 inputs require grad, and backward() runs from
  // sum_k sum(output_k * weights[k]) over the floating outputs
  bool grad = false;
  const std::vector<std::vector<double>>* loss_weights = nullptr;
};

struct ExecResult {
  bool ok = true;
  std::string error;  // an lt::Error, or a dtype or shape other than the program's
  std::vector<std::vector<double>> outputs;           // one per program output
  std::map<const Node*, std::vector<double>> random;  // top-level random draws
  std::map<const Node*, std::vector<double>> grads;   // grad: per float input (empty: none)
};

ExecResult execute(const Program& p, const DataSet& data, const ExecOptions& options);

}  // namespace fuzz
