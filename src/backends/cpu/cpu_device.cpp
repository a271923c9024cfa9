#include "backends/cpu/cpu_device.h"

#include <cstdio>
#include <mutex>

#include "backends/cpu/kernels.h"
#include "backends/cpu/program.h"
#include "core/overload.h"
#include "metrics/known.h"
#include "runtime/exit_gate.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

// A call: the body's program on the caller's memory (see CallStep).
void run_call(const CallStep& c, const RunContext& caller) {
  const Program& body = *c.body;
  RunContext ctx;
  ctx.base.resize(body.storages.size());
  std::vector<runtime::ScalarArg> scalars;
  scalars.reserve(c.scalars.size());
  for (int slot : c.scalars) scalars.push_back((*caller.scalars)[static_cast<size_t>(slot)]);
  ctx.scalars = &scalars;
  ctx.passes = caller.passes;
  ctx.read_ahead = caller.read_ahead;  // a loop's hints reach the products of a call in its body
  ctx.shadows = caller.shadows;
  ctx.choices = caller.choices;
  ctx.comm = caller.comm;
  std::vector<int64_t> tickets(static_cast<size_t>(body.num_tickets));
  ctx.tickets = tickets.data();
  char* scratch = c.scratch >= 0 ? caller.base[static_cast<size_t>(c.scratch)] : nullptr;
  for (size_t i = 0; i < body.storages.size(); ++i) {
    const Storage& st = body.storages[i];
    const auto slot = static_cast<size_t>(st.slot);
    switch (st.kind) {
      case StorageKind::Param: {
        const View& v = c.params[slot];
        ctx.base[i] = caller.base[static_cast<size_t>(v.storage)] +
                      v.offset * static_cast<int64_t>(itemsize(v.dtype));
        break;
      }
      case StorageKind::Arena:
        ctx.base[i] = scratch + st.offset;
        break;
      case StorageKind::Output:
        ctx.base[i] = caller.base[static_cast<size_t>(c.outputs[slot])];
        break;
    }
  }
  run_steps(body, ctx);
}

}  // namespace

void run_steps(const Program& prog, const RunContext& ctx, size_t first) {
  for (size_t i = first; i < prog.steps.size(); ++i)
    std::visit(Overload{
                   [&](const FusedStep& s) { run_fused(s, ctx); },
                   [&](const ReduceStep& s) { run_reduce(s, ctx); },
                   [&](const MatmulStep& s) {
                     if (s.beside_next)
                       run_matmuls(s, std::get<MatmulStep>(prog.steps[++i]), ctx);
                     else
                       run_matmul(s, ctx);
                   },
                   [&](const GatherStep& s) { run_gather(s, ctx); },
                   [&](const CheckStep& s) { run_check(s, ctx); },
                   [&](const CallStep& s) { run_call(s, ctx); },
                   [&](const LoopStep& s) { run_loop(s, ctx); },
                   [&](const AdamWStep& s) { run_adamw(s, ctx); },
                   [&](const CollectiveStep& s) { run_collective(s, ctx); },
               },
               prog.steps[i]);
}

namespace {

// Replays a lowered program. A run takes its arena (the intermediates) and its outputs
// from the buffer cache and gives the arena back when it ends: a step that repeats gets the
// same memory back, and programs cached for many shapes hold no memory between runs (an
// arena kept by each, as before, grew with every shape a model ran at).
class CpuExecutable : public runtime::Executable {
 public:
  CpuExecutable(Program p, const Choices& choices) : prog_(std::move(p)) {
    ctx_.base.resize(prog_.storages.size());
    ctx_.passes = prog_.passes;
    tickets_.resize(static_cast<size_t>(prog_.num_tickets));
    ctx_.tickets = tickets_.data();
    ctx_.choices = choices;
  }

  std::vector<runtime::BufferPtr> run(const std::vector<runtime::BufferPtr>& params,
                                      const std::vector<runtime::ScalarArg>& scalars,
                                      const std::vector<char>& donated) override {
    std::lock_guard<std::mutex> lock(mu_);  // ctx_ belongs to one run at a time
    const runtime::BufferPtr arena = take_arena();
    std::vector<runtime::BufferPtr> outputs(static_cast<size_t>(prog_.num_outputs));
    for (const Donation& d : prog_.donations)
      if (static_cast<size_t>(d.param_slot) < donated.size() && donated[d.param_slot]) {
        outputs[static_cast<size_t>(d.output_slot)] = params[static_cast<size_t>(d.param_slot)];
        metrics::donated_buffers.add();
      }
    for (size_t i = 0; i < prog_.storages.size(); ++i) {
      const Storage& st = prog_.storages[i];
      if (st.kind == StorageKind::Param) {
        ctx_.base[i] = static_cast<char*>(params[static_cast<size_t>(st.slot)]->data());
      } else if (st.kind == StorageKind::Output) {
        runtime::BufferPtr& out = outputs[static_cast<size_t>(st.slot)];
        if (!out) out = allocate_output(i, static_cast<size_t>(st.bytes));
        ctx_.base[i] = static_cast<char*>(out->data());
      } else if (st.kind == StorageKind::Arena) {
        ctx_.base[i] = static_cast<char*>(arena ? arena->data() : nullptr) + st.offset;
      }
    }
    ctx_.scalars = &scalars;
    if (prog_.collectives) ctx_.comm = &runtime::current_communicator();
    {
      metrics::ScopedTimer kernels(metrics::kernel_time);
      try {
        run_steps(prog_, ctx_);
      } catch (...) {
        // the collectives still running read and write this run's memory
        if (ctx_.comm) ctx_.comm->queue().reset();
        throw;
      }
    }
    std::vector<runtime::BufferPtr> results;
    results.reserve(prog_.results.size());
    for (const ResultBinding& b : prog_.results) {
      const Storage& st = prog_.storages[static_cast<size_t>(b.storage)];
      results.push_back(st.kind == StorageKind::Param ? params[static_cast<size_t>(st.slot)]
                                                      : outputs[static_cast<size_t>(st.slot)]);
    }
    return results;
  }

  std::string describe() const override { return cpu::describe(prog_); }

  runtime::BufferPtr take_arena() const {
    if (prog_.arena_bytes <= 0) return nullptr;
    try {
      return runtime::make_buffer(static_cast<size_t>(prog_.arena_bytes), /*transient=*/true);
    } catch (const runtime::OutOfMemory& e) {
      e.rethrow_for("sync",
                    detail::cat("the intermediate results of a graph of ", prog_.steps.size(),
                                " steps (the largest: ", prog_.largest_intermediate, ")"));
    }
  }

  runtime::BufferPtr allocate_output(size_t storage, size_t bytes) const {
    try {
      return runtime::make_buffer(bytes);
    } catch (const runtime::OutOfMemory& e) {
      for (const ResultBinding& b : prog_.results)
        if (static_cast<size_t>(b.storage) == storage)
          e.rethrow_for(b.op, detail::cat("its result, ", dtype_name(b.dtype), b.shape.str()));
      throw;
    }
  }
  int64_t arena_bytes() const override { return prog_.arena_bytes; }
  uint64_t collectives() const override { return prog_.collectives; }
  std::string describe_collectives() const override { return prog_.collectives_text; }

 private:
  Program prog_;
  RunContext ctx_;
  std::vector<int64_t> tickets_;
  std::mutex mu_;
};

}  // namespace

std::shared_ptr<runtime::Executable> CpuDevice::compile(const ir::Graph& g,
                                                        const runtime::PassSet& passes) {
  Choices choices;  // those whose passes are on
  if (passes.on(runtime::Pass::GemmChoice)) choices.gemm = &gemm_choice_;
  if (passes.on(runtime::Pass::ReadAheadChoice)) choices.read_ahead = &read_ahead_choice_;
  return std::make_shared<CpuExecutable>(lower(g, -1, passes), choices);
}

void CpuDevice::clear_caches() {
  clear_body_programs();
}

std::string CpuDevice::kernel_choices() const {
  std::string out;
  char line[256];
  for (const GemmChoice::Entry& e : gemm_choice_.entries()) {
    std::snprintf(line, sizeof line, "matmul %s: %s%s (", e.shape.c_str(),
                  gemm_lib_name(e.plan.lib), e.plan.other_split ? " on the other split" : "");
    out += line;
    if (e.stored) {
      out += "chosen by an earlier process: LAZYTRACE_CACHE_DIR)\n";
      continue;
    }
    out += "GFLOP/s";
    for (int split = 0; split < 2; ++split) {
      std::string timed;
      for (int i = 0; i < kGemmLibs; ++i)
        if (e.gflops[split][i] > 0) {
          std::snprintf(line, sizeof line, " %s %.1f", gemm_lib_name(static_cast<GemmLib>(i)),
                        e.gflops[split][i]);
          timed += line;
        }
      if (split == 1 && !timed.empty()) out += "; other split:";
      out += timed;
    }
    out += ")\n";
  }
  return out;
}

runtime::Device& cpu_device() {
  static CpuDevice* d = [] {
    // BLAS runs on one thread per call; run_matmul spreads blocks over the thread pool,
    // so OpenBLAS's own workers never spin beside the pool's.
    init_gemm_libs();
    runtime::close_runs_at_exit();  // before libxsmm's finalizer, which init registered
    auto* device = new CpuDevice();
    device->gemm_choice().keep_in(gemm_choice_file());
    return device;
  }();
  return *d;
}

}  // namespace lazytrace::cpu
