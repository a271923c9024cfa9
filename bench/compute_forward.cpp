// The compute-heavy forward of bench/peers/python_peers.py from C++ (hidden 512, intermediate
// 2048, 8 heads, 4 kv heads, 4 layers, batch 2 x seq 256, scan_layers over stacked weights),
// without Python, for a profile of where its time goes:
//
//   perf record -D 2000 build/bench/compute_forward [calls]
//   perf report --sort=dso    # [JIT]: the products' kernels (oneDNN's, libxsmm's)
//
// Prints the median forward time, and on stderr the kernel chosen for each product. Not a Google
// Benchmark program: scripts/run-bench.sh leaves it alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include <lazytrace/lazytrace.h>

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::max(1, std::atoi(argv[1])) : 80;
  namespace nn = lt::nn;
  nn::DecoderConfig c{.vocab = 256,
                      .hidden = 512,
                      .intermediate = 2048,
                      .heads = 8,
                      .kv_heads = 4,
                      .layers = 4,
                      .max_seq = 256};
  c.stacked_layers = true;
  lt::manual_seed(1);
  nn::DecoderLM model(c);
  model.layers_mode = nn::LayersMode::scan;
  model.scan_options.is_layer_pure = true;
  std::mt19937_64 rng(2);
  std::vector<int64_t> tokens(2 * 256);
  for (int64_t& t : tokens) t = static_cast<int64_t>(rng() % 256);
  const lt::Tensor x = lt::tensor(tokens, {2, 256});
  lt::sync();
  auto forward = [&] {
    lt::NoGradGuard no_grad;
    lt::Tensor y = model(x);
    lt::sync({y});
  };
  forward();  // traced, compiled and its products' kernels chosen here
  std::vector<double> ms;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    forward();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("forward: median %.2f ms of %d\n", ms[ms.size() / 2], calls);
  std::fprintf(stderr, "kernel choices:\n%s", lt::debug::kernel_choices().c_str());
  return 0;
}
