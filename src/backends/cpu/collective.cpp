// Collective steps: the run's communicator exchanges the buffers; the scale is applied here.
#include <cstring>

#include "backends/cpu/dtype_dispatch.h"
#include "backends/cpu/kernels.h"
#include "metrics/known.h"

namespace lazytrace::cpu {
namespace {

void scale_in_place(char* data, int64_t count, DType dtype, double scale) {
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      auto* p = reinterpret_cast<double*>(data);
      for (int64_t i = 0; i < count; ++i) p[i] *= scale;
    } else if constexpr (!std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      auto* p = reinterpret_cast<T*>(data);
      const auto s = static_cast<float>(scale);
      for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<float>(p[i]) * s);
    }
  });
}

}  // namespace

void run_collective(const CollectiveStep& s, const RunContext& ctx) {
  const char* name = ir::op_name(s.op);
  runtime::Communicator& comm = *ctx.comm;
  if (comm.size() != s.ranks)
    fail(name, "the graph was traced for ", s.ranks, " ranks but runs on ", comm.describe(),
         ": trace it again under the communicator it runs with.");
  const DType dt = s.in.dtype;
  const size_t item = itemsize(dt);
  const char* in = ctx.base[static_cast<size_t>(s.in.storage)] + s.in.offset * item;
  char* out = ctx.base[static_cast<size_t>(s.out_storage)];
  const int64_t n = s.in.shape.numel();
  int64_t written = n;
  metrics::ScopedTimer timer(metrics::collective_time);
  metrics::collective_count.add();
  metrics::collective_bytes.add(n * static_cast<int64_t>(item));
  if (s.op == ir::OpKind::ReduceScatter) {
    written = n / s.ranks;
    comm.reduce_scatter(in, out, written, dt, s.reduce);
  } else if (s.op == ir::OpKind::AllGather) {
    comm.all_gather(in, out, n, dt);
    written = n * s.ranks;
  } else if (s.op == ir::OpKind::AllReduce) {
    comm.all_reduce(in, out, n, dt, s.reduce);
  } else {
    if (out != in) std::memcpy(out, in, static_cast<size_t>(n) * item);
    comm.broadcast(out, n, dt, s.root);
  }
  if (s.scale != 1) scale_in_place(out, written, dt, s.scale);
}

}  // namespace lazytrace::cpu
