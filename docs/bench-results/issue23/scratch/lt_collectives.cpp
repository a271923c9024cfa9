// lt::dist's collectives on 64 MiB of float32 through lazytrace itself (a graph of one
// collective, run 12 times, the first 2 not timed), as `lazytrace train` issues them:
// all_reduce(x, "mean"), reduce_scatter(x, "mean"), all_gather of half of x. Rank 0 prints
// the median and the fastest. Build (from the repository root, after `make build`):
//   g++ -O2 -std=c++20 -Iinclude docs/bench-results/issue23/scratch/lt_collectives.cpp \
//     build/src/liblazytrace.a $(mpicxx --showme:link) -lopenblas -lxsmm -ldnnl -lgomp \
//     -lpthread -ldl -o /tmp/lt_collectives
// Run: mpirun -np 2 -x LAZYTRACE_NUM_THREADS=1 [-x LAZYTRACE_MPI_ALL_REDUCE=mpi]
// /tmp/lt_collectives [bfloat16]   (bfloat16: the same elements in bfloat16, 32 MiB)
#include <lazytrace/lazytrace.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  lt::dist::init();
  const int64_t n = 16 << 20;
  const bool bf16 = argc > 1 && std::string(argv[1]) == "bfloat16";
  lt::Tensor x = lt::full({n}, 0.5f);
  if (bf16) x = lt::astype(x, lt::bfloat16);
  lt::sync({x});
  const char* how = std::getenv("LAZYTRACE_MPI_ALL_REDUCE");
  for (int which = 0; which < 3; ++which) {
    std::vector<double> t;
    for (int rep = 0; rep < 12; ++rep) {
      lt::dist::barrier();
      const auto t0 = std::chrono::steady_clock::now();
      lt::Tensor y = which == 0   ? lt::all_reduce(x, "mean")
                     : which == 1 ? lt::reduce_scatter(x, "mean")
                                  : lt::all_gather(lt::slice(x, 0, 0, n / 2));
      lt::sync({y});
      const auto t1 = std::chrono::steady_clock::now();
      if (rep > 1) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(t.begin(), t.end());
    if (lt::dist::rank() == 0)
      std::printf("%s %s (LAZYTRACE_MPI_ALL_REDUCE=%s): %.1f ms median, %.1f fastest\n",
                  which == 0   ? "all_reduce mean"
                  : which == 1 ? "reduce_scatter mean"
                               : "all_gather",
                  bf16 ? "bfloat16" : "float32", how ? how : "pairwise", t[t.size() / 2], t[0]);
  }
}
