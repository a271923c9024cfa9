// Tensors shared between threads: recording on several threads, syncing one thread's
// tensors on another, dropping them anywhere.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <thread>
#include <vector>

namespace {

TEST(Threading, ThreadsShareWeightsAndSyncConcurrently) {
  auto w = lt::tensor(std::vector<float>(16 * 16, 0.5f), {16, 16});
  std::vector<std::thread> threads;
  std::vector<float> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      float total = 0;
      for (int step = 0; step < 200; ++step) {
        auto x = lt::full({4, 16}, static_cast<float>(t + 1));
        total += lt::sum(lt::matmul(x, w) * 0.5f).item<float>();
      }
      results[static_cast<size_t>(t)] = total;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t)  // each of 4x16 outputs is 16 * (t+1) * 0.5, halved
    EXPECT_FLOAT_EQ(results[static_cast<size_t>(t)], 200.0f * 64 * 16 * (t + 1) * 0.5f * 0.5f);
}

TEST(Threading, APendingTensorMayBeDroppedOrSyncedOnAnotherThread) {
  lt::Tensor made_elsewhere, dropped_here;
  std::thread([&] {
    auto x = lt::tensor({1.0f, 2.0f});
    made_elsewhere = x * 3.0f;
    dropped_here = lt::exp(x);
  }).join();
  EXPECT_TRUE(made_elsewhere.is_pending());
  dropped_here = lt::Tensor();  // unlinks from the other thread's list
  EXPECT_EQ(made_elsewhere.to_vector<float>(), (std::vector<float>{3, 6}));
  auto mine = lt::tensor({1.0f}) + 1.0f;
  lt::sync();  // this thread's list only
  EXPECT_EQ(mine.item<float>(), 2.0f);
}

}  // namespace
