// Collective steps: the run's communicator exchanges the buffers (and scales what it reduces).
// A blocking step runs on the run's thread; a started one (plan/overlap_collectives.cpp) on
// the communicator's queue, beside the steps up to its wait.
#include <cstring>

#include "backends/cpu/kernels.h"
#include "metrics/known.h"

namespace lazytrace::cpu {
namespace {

// One exchange of `count` elements, whole or a part of a step's.
struct Exchange {
  ir::OpKind op;
  runtime::ReduceOp reduce;
  double scale;
  int root;
  DType dtype;
  char* in;  // written only where `narrowed` is set
  char* out;
  int64_t count;
  const float* narrowed = nullptr;  // rounded into `in` first (a part's cast)
};

void run_exchange(const Exchange& x, runtime::Communicator& comm) {
  const size_t item = itemsize(x.dtype);
  const int64_t n = x.count, ranks = comm.size();
  int64_t written = n;
  metrics::ScopedTimer timer(metrics::collective_time);
  metrics::collective_count.add();
  metrics::collective_bytes.add(n * static_cast<int64_t>(item));
  if (x.narrowed) runtime::narrow(x.narrowed, n, x.in, x.dtype);
  if (x.op == ir::OpKind::ReduceScatter)
    return comm.reduce_scatter(x.in, x.out, n / ranks, x.dtype, x.reduce, x.scale);
  if (x.op == ir::OpKind::AllReduce)
    return comm.all_reduce(x.in, x.out, n, x.dtype, x.reduce, x.scale);
  if (x.op == ir::OpKind::AllGather) {
    comm.all_gather(x.in, x.out, n, x.dtype);
    written = n * ranks;
  } else {
    if (x.out != x.in) std::memcpy(x.out, x.in, static_cast<size_t>(n) * item);
    comm.broadcast(x.out, n, x.dtype, x.root);
  }
  runtime::scale_in_place(x.out, written, x.dtype, x.scale);
}

runtime::Communicator& communicator_of(const CollectiveStep& s, const RunContext& ctx) {
  runtime::Communicator& comm = *ctx.comm;
  if (comm.size() != s.ranks)
    fail(ir::op_name(s.op), "the graph was traced for ", s.ranks, " ranks but runs on ",
         comm.describe(), ": trace it again under the communicator it runs with.");
  return comm;
}

// The exchange of elements [in_at, in_at + count) of the storage `src` into [out_at, ...)
// of the step's output.
Exchange part_of(const CollectiveStep& s, const RunContext& ctx, int src, int64_t in_at,
                 int64_t out_at, int64_t count) {
  const size_t item = itemsize(s.in.dtype);
  return {s.op,
          s.reduce,
          s.scale,
          s.root,
          s.in.dtype,
          ctx.base[static_cast<size_t>(src)] + in_at * static_cast<int64_t>(item),
          ctx.base[static_cast<size_t>(s.out_storage)] + out_at * static_cast<int64_t>(item),
          count};
}

int64_t start(runtime::Communicator& comm, const Exchange& x) {
  return comm.queue().start([x, &comm] { run_exchange(x, comm); });
}

}  // namespace

void run_collective(const CollectiveStep& s, const RunContext& ctx) {
  using Phase = CollectiveStep::Phase;
  runtime::Communicator& comm = communicator_of(s, ctx);
  if (s.phase == Phase::Wait) {
    metrics::ScopedTimer waited(metrics::collective_wait_time);
    return comm.queue().wait(ctx.tickets[s.ticket]);
  }
  const Exchange x = part_of(s, ctx, s.in.storage, s.in.offset, 0, s.in.shape.numel());
  if (s.phase == Phase::Start) {
    ctx.tickets[s.ticket] = start(comm, x);
    return;
  }
  metrics::ScopedTimer waited(metrics::collective_wait_time);
  comm.finish_started();  // the collectives started before this one come first
  run_exchange(x, comm);
}

void start_loop_collectives(const LoopStep& s, const RunContext& ctx, int64_t slice) {
  for (const LoopStep::Collective& c : s.collectives) {
    runtime::Communicator& comm = communicator_of(c.step, ctx);
    for (const LoopStep::Collective::Part& p : c.parts) {
      if (p.per_slice ? slice < 0 : p.after != slice) continue;
      const int64_t at = p.per_slice ? slice * p.count : 0;
      if (!p.narrowed) {
        ctx.tickets[c.step.ticket] =
            start(comm, part_of(c.step, ctx, p.src, p.src_at + at, p.out_at + at, p.count));
        continue;
      }
      // the cast the part stands for, then the exchange from where it wrote
      Exchange x = part_of(c.step, ctx, c.step.in.storage, c.step.in.offset + p.out_at + at,
                           p.out_at + at, p.count);
      x.narrowed =
          reinterpret_cast<const float*>(ctx.base[static_cast<size_t>(p.src)]) + p.src_at + at;
      ctx.tickets[c.step.ticket] = start(comm, x);
    }
  }
}

}  // namespace lazytrace::cpu
