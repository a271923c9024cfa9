#pragma once
// The CPU device: lowers a graph with the compiler and runs the kernel list.
#include "runtime/device.h"

namespace lazytrace::cpu {

class CpuDevice : public runtime::Device {
 public:
  const char* name() const override { return "cpu"; }
  std::shared_ptr<runtime::Executable> compile(const ir::Graph& g,
                                               const runtime::PassSet& passes) override;
  /** Forgets the compiled bodies (executables keep the ones they use). */
  void clear_caches() override;
};

/** The process-wide CPU device. */
runtime::Device& cpu_device();

}  // namespace lazytrace::cpu
