// Long chains and many steps: no stack overflow, no memory growth.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cmath>
#include <fstream>
#include <string>

#include "runtime/buffer.h"

namespace {

int64_t rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// Every op moves the result by its own amount (pseudo-random steps that neither converge nor
// cancel), so a wrong or dropped op anywhere in the chain shows in the last digits checked.
TEST(Robustness, HundredThousandChainedOpsSync) {
  auto step = [](int i) { return static_cast<double>((i * 7919) % 13 - 6) * 1e-3; };
  lt::Tensor y = lt::tensor({0.5, -0.25});
  for (int i = 0; i < 100000; ++i) y = (i % 2 == 0) ? y + step(i) : y * (1 + step(i) * 1e-2);
  const std::vector<double> got = y.to_vector<double>();
  double ref[2] = {0.5, -0.25};
  for (int i = 0; i < 100000; ++i)
    for (double& r : ref) r = (i % 2 == 0) ? r + step(i) : r * (1 + step(i) * 1e-2);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NEAR(got[static_cast<size_t>(k)], ref[k], 1e-9 * std::fabs(ref[k])) << k;
    EXPECT_GT(std::fabs(ref[k] - (k == 0 ? 0.5 : -0.25)), 1e-3) << "the chain moved it";
  }
}

TEST(Robustness, HundredThousandChainedOpsFreedWithoutSync) {
  auto x = lt::tensor({1.0f});
  {
    lt::Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = lt::exp(y) * 0.5f;
  }  // releasing the recorded chain must not recurse 100,000 deep
  SUCCEED();
}

TEST(Robustness, TenThousandStepsDoNotGrowMemory) {
  lt::manual_seed(0);
  auto w = lt::randn({32, 32}) * 0.1f;
  auto b = lt::zeros({32});
  lt::sync();
  auto step = [&](int i) {
    auto x = lt::randn({16, 32});
    auto h = lt::tanh(lt::matmul(x, w) + b);
    auto loss = lt::mean(h * h);
    w.copy_(w - 0.001f * lt::matmul(lt::transpose(x), h) / 16.0f);
    b.copy_(b * (1.0f - 1e-4f * static_cast<float>(i % 3)));
    lt::sync();
    return loss;
  };
  for (int i = 0; i < 200; ++i) step(i);
  const int64_t live0 = lt::runtime::Buffer::live_bytes(), rss0 = rss_kb();
  lt::metrics::reset();
  for (int i = 0; i < 10000; ++i) step(i);
  EXPECT_EQ(lt::metrics::counter("CompileCount"), 0);
  EXPECT_LE(lt::runtime::Buffer::live_bytes(), live0);
#ifdef __SANITIZE_ADDRESS__  // AddressSanitizer keeps freed memory in quarantine
  (void)rss0;
#else
  EXPECT_LT(rss_kb() - rss0, 8 * 1024) << "RSS grew over 10,000 steps";
#endif
  EXPECT_TRUE(std::isfinite(lt::sum(w).item<float>()));
}

}  // namespace
