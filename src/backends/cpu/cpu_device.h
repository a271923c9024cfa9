#pragma once
// The CPU device: lowers a graph with the compiler and runs the kernel list.
#include "backends/cpu/gemm.h"
#include "backends/cpu/timed_choice.h"
#include "runtime/device.h"

namespace lazytrace::cpu {

class CpuDevice : public runtime::Device {
 public:
  const char* name() const override { return "cpu"; }
  std::shared_ptr<runtime::Executable> compile(const ir::Graph& g,
                                               const runtime::PassSet& passes) override;
  /** Forgets the compiled bodies (executables keep the ones they use). */
  void clear_caches() override;
  /** Which kernel each product runs on, as measured (gemm.h). */
  GemmChoice& gemm_choice() { return gemm_choice_; }
  std::string kernel_choices() const override;

 private:
  GemmChoice gemm_choice_;
  TimedChoice read_ahead_choice_{"ReadAheadChoice", "not ahead", "ahead"};
};

/** The process-wide CPU device. */
runtime::Device& cpu_device();

}  // namespace lazytrace::cpu
