// Open MPI's all-reduce on this machine: 64 MiB of float32 gradients (the compute-heavy
// decoder's) all-reduced in buckets of 64 MiB down to 1 MiB, with the blocking call (what
// MpiWorld runs with LAZYTRACE_MPI_ALL_REDUCE=mpi) and with the non-blocking one polled to
// completion (MPI_Iallreduce + MPI_Test), and reduce-scatter + all-gather per bucket:
// MPI_Reduce_scatter_block, and the pairwise exchange over MPI_Sendrecv and MPI_Reduce_local
// in 4 MiB chunks, close to what lt::dist runs for ZeRO-1's reduce-scatter and, with its
// all-gather also pairwise, for an all-reduce (src/dist/mpi.cpp; inside lazytrace Open MPI's
// calls were slower still, docs/perf-log.md).
// Medians of 5 after one warm-up, on rank 0. Run: mpirun -np 2 mpi_collectives
// (make bench-dist builds it with mpicxx and runs it).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

template <typename F>
double median_ms(F&& f) {
  std::vector<double> t;
  for (int rep = 0; rep < 6; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    if (rep > 0) t.push_back((MPI_Wtime() - t0) * 1e3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ranks - 1 rounds: send a peer its part of the peer's block, add in what comes back; in
// chunks of 4 MiB of the input, as lt::dist's default
void pairwise_reduce_scatter(const float* in, float* out, int count, int rank, int size,
                             std::vector<float>& scratch) {
  const int step = std::min(count, (1 << 20) / size);
  scratch.resize(static_cast<size_t>(step));
  for (int at = 0; at < count; at += step) {
    const int n = std::min(step, count - at);
    for (int k = 1; k < size; ++k) {
      const int dst = (rank + k) % size, src = (rank - k + size) % size;
      float* recv = k == 1 ? out + at : scratch.data();
      MPI_Sendrecv(in + static_cast<size_t>(dst) * count + at, n, MPI_FLOAT, dst, 1, recv, n,
                   MPI_FLOAT, src, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Reduce_local(k == 1 ? in + static_cast<size_t>(rank) * count + at : scratch.data(),
                       out + at, n, MPI_FLOAT, MPI_SUM);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int total = 16 << 20;  // floats: 64 MiB
  std::vector<float> a(total, 0.5f), part(total / size), scratch;
  if (rank == 0)
    std::printf(
        "%d ranks, %d MiB of float32 in buckets\n\n"
        "| bucket MiB | all-reduce ms | non-blocking all-reduce ms | reduce-scatter + "
        "all-gather ms | pairwise reduce-scatter + all-gather ms |\n|---|---|---|---|---|\n",
        size, total >> 18);
  for (int mib : {64, 16, 4, 1}) {
    const int n = mib << 18, buckets = total / n;
    const double blocking = median_ms([&] {
      for (int b = 0; b < buckets; ++b)
        MPI_Allreduce(MPI_IN_PLACE, a.data() + static_cast<size_t>(b) * n, n, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
    });
    const double polled = median_ms([&] {
      for (int b = 0; b < buckets; ++b) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, a.data() + static_cast<size_t>(b) * n, n, MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &req);
        for (int done = 0; !done;) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
    });
    const double pair = median_ms([&] {
      for (int b = 0; b < buckets; ++b) {
        float* at = a.data() + static_cast<size_t>(b) * n;
        MPI_Reduce_scatter_block(at, part.data(), n / size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allgather(part.data(), n / size, MPI_FLOAT, at, n / size, MPI_FLOAT, MPI_COMM_WORLD);
      }
    });
    const double pairwise = median_ms([&] {
      for (int b = 0; b < buckets; ++b) {
        float* at = a.data() + static_cast<size_t>(b) * n;
        pairwise_reduce_scatter(at, part.data(), n / size, rank, size, scratch);
        MPI_Allgather(part.data(), n / size, MPI_FLOAT, at, n / size, MPI_FLOAT, MPI_COMM_WORLD);
      }
    });
    if (rank == 0)
      std::printf("| %d | %.1f | %.1f | %.1f | %.1f |\n", mib, blocking, polled, pair, pairwise);
  }
  MPI_Finalize();
  return 0;
}
