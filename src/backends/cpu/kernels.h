#pragma once
// The CPU kernels, one per step kind of a lowered Program.
#include <vector>

#include "compiler/program.h"
#include "runtime/device.h"

namespace lazytrace::cpu {

/** What a step needs at run time: a base pointer per storage, and the scalar values. */
struct RunContext {
  std::vector<char*> base;
  const std::vector<runtime::ScalarArg>* scalars = nullptr;

  runtime::ScalarArg scalar(const compiler::View& v) const {
    if (v.scalar_slot >= 0) return (*scalars)[v.scalar_slot];
    return {v.value, v.ivalue};
  }
};

void run_fused(const compiler::FusedStep& s, const RunContext& ctx);
void run_reduce(const compiler::ReduceStep& s, const RunContext& ctx);
void run_matmul(const compiler::MatmulStep& s, const RunContext& ctx);
void run_gather(const compiler::GatherStep& s, const RunContext& ctx);

}  // namespace lazytrace::cpu
