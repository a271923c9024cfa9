#include <lazytrace/lazytrace.h>
#include <chrono>
#include <cstdio>
int main(int argc, char** argv) {
  int m = atoi(argv[1]), k = atoi(argv[2]), n = atoi(argv[3]);
  lt::Tensor a = lt::randn({m, k}), b = lt::randn({k, n});
  lt::sync({a, b});
  for (int r = 0; r < 5; ++r) {
    const int N = 200000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; ++i) {
      lt::Tensor c = lt::matmul(a, b);
      lt::sync({c});
    }
    auto t1 = std::chrono::steady_clock::now();
    printf("%.3f us/call\n", std::chrono::duration<double>(t1 - t0).count() / N * 1e6);
  }
  printf("%s\n", lt::debug::kernel_choices().c_str());
}
