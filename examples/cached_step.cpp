// A repeated step compiles once: ten steps of a small MLP on fresh data, with a scale
// that changes every step, give one compile and nine cache hits.
#include <lazytrace/lazytrace.h>
#include <cstdio>

int main() {
  lt::manual_seed(0);
  auto w1 = lt::randn({64, 128}) * 0.1f;
  auto w2 = lt::randn({128, 10}) * 0.1f;
  lt::sync();
  lt::metrics::reset();
  for (int step = 0; step < 10; ++step) {
    auto x = lt::randn({32, 64});
    float scale = 1.5f + 0.1f * static_cast<float>(step);  // 1.0 would be its own graph
    auto logits = lt::matmul(lt::gelu(lt::matmul(x, w1)) * scale, w2);
    auto probs = lt::softmax(logits, -1);
    auto top = lt::amax(probs, {1});
    lt::sync();
    float mean_top = lt::mean(top).item<float>();
    std::printf("step %d: mean top probability %.4f (compiles so far: %lld)\n", step, mean_top,
                static_cast<long long>(lt::metrics::counter("CompileCount")));
  }
  std::printf("CompileCount %lld (the step, and the mean read), CacheHit %lld\n",
              static_cast<long long>(lt::metrics::counter("CompileCount")),
              static_cast<long long>(lt::metrics::counter("CacheHit")));
  std::printf(
      "%s", lt::debug::to_program({lt::gelu(lt::matmul(lt::randn({32, 64}), w1)) * 2.5f}).c_str());
  return lt::metrics::counter("CompileCount") == 2 ? 0 : 1;
}
