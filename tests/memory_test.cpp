// Sharing memory with other libraries: lt::from_blob (no copy), lt::copy_from, lt::from_writer,
// lt::host_data.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "expect_error.h"
#include "tiny_decoder.h"

namespace {

TEST(Memory, FromBlobReadsTheCallersMemoryWithoutCopying) {
  auto data = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  lt::Tensor t = lt::from_blob(data->data(), {2, 3}, lt::float32,
                               std::shared_ptr<const void>(data, data->data()));
  EXPECT_EQ(t.shape(), (lt::Shape{2, 3}));
  EXPECT_EQ(lt::host_data(t).get(), data->data());  // the same memory
  EXPECT_EQ(lt::sum(t, {1}).to_vector<float>(), (std::vector<float>{6, 15}));
}

TEST(Memory, FromBlobKeepsItsOwnerWhileTheTensorLives) {
  std::weak_ptr<std::vector<int64_t>> watch;
  lt::Tensor t;
  {
    auto data = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{7, 8, 9});
    watch = data;
    t = lt::from_blob(data->data(), {3}, lt::int64,
                      std::shared_ptr<const void>(data, data->data()));
  }
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ((t * 2).to_vector<int64_t>(), (std::vector<int64_t>{14, 16, 18}));
  t = lt::Tensor();
  EXPECT_TRUE(watch.expired());
}

// The backend writes a result into an input buffer nobody else reads (donation); never into
// memory the caller owns.
TEST(Memory, ResultsAreNeverWrittenIntoTheCallersMemory) {
  std::vector<float> data(4096, 1.0f);
  lt::Tensor t = lt::from_blob(data.data(), {4096}, lt::float32, nullptr);
  lt::Tensor y = t * 3.0f + 1.0f;
  t = lt::Tensor();  // the only handle: its buffer would be donated if it were the library's
  lt::sync({y});
  for (float v : data) ASSERT_EQ(v, 1.0f);
  EXPECT_EQ(y.to_vector<float>()[17], 4.0f);
}

TEST(Memory, CopyFromCopies) {
  std::vector<double> data{0.5, -1.5};
  lt::Tensor t = lt::copy_from(data.data(), {2}, lt::float64);
  data[0] = 100;
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{0.5, -1.5}));
  EXPECT_NE(lt::host_data(t).get(), static_cast<const void*>(data.data()));
}

TEST(Memory, HostDataMaterializesAndStaysValidAfterTheTensorChanges) {
  lt::Tensor t = lt::arange(4, lt::float32) * 2.0f;
  std::shared_ptr<const void> p = lt::host_data(t);
  t.copy_(lt::zeros({4}));
  const auto* f = static_cast<const float*>(p.get());
  EXPECT_EQ(std::vector<float>(f, f + 4), (std::vector<float>{0, 2, 4, 6}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
}

TEST(Memory, FromWriterWritesTheTensorsOwnMemoryInPlace) {
  const int64_t before = lt::metrics::memory_bytes();
  const void* written = nullptr;
  size_t written_bytes = 0;
  lt::Tensor t = lt::from_writer({2, 3}, lt::float32, [&](void* data, size_t nbytes) {
    written = data;
    written_bytes = nbytes;
    auto* f = static_cast<float*>(data);
    for (int i = 0; i < 6; ++i) f[i] = static_cast<float>(i);
  });
  EXPECT_EQ(written_bytes, 6 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(written) % 64, 0u);
  EXPECT_EQ(lt::metrics::memory_bytes() - before, 24);  // the library's own memory
  EXPECT_EQ(lt::host_data(t).get(), written);           // not copied
  EXPECT_EQ(lt::sum(t, {1}).to_vector<float>(), (std::vector<float>{3, 12}));
  t.copy_(t + 1.0f);  // an update in place
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  size_t empty_bytes = 1;
  lt::Tensor e = lt::from_writer({0, 3}, lt::int64, [&](void*, size_t n) { empty_bytes = n; });
  EXPECT_EQ(empty_bytes, 0u);
  EXPECT_EQ(e.shape(), (lt::Shape{0, 3}));
}

TEST(Memory, FromWriterPassesTheWritersExceptionOn) {
  const int64_t before = lt::metrics::memory_bytes();
  EXPECT_THROW(
      lt::from_writer({4}, lt::int32, [](void*, size_t) { throw std::runtime_error("x"); }),
      std::runtime_error);
  EXPECT_EQ(lt::metrics::memory_bytes(), before);
}

TEST(Memory, MisuseIsAnError) {
  expect_error([] { lt::from_blob(nullptr, {2}, lt::float32, nullptr); }, {"[from_blob]", "null"});
  alignas(8) char bytes[16] = {};
  expect_error([&] { lt::from_blob(bytes + 1, {2}, lt::float32, nullptr); },
               {"[from_blob]", "aligned"});
  expect_error([] { lt::host_data(lt::Tensor()); }, {"[host_data]", "undefined"});
  expect_error([] { lt::copy_from(nullptr, {3}, lt::int32); }, {"[copy_from]", "null"});
  expect_error([] { lt::from_writer({3}, lt::int32, nullptr); }, {"[from_writer]", "empty"});
}

}  // namespace

namespace {

// torch_xla's per-step stacking pattern: a for loop over slices of one stacked weight, then
// backward. The gradient of L slices costs the weight's size, not L times it (the
// slice_grads pass); with the pass off it is L full-size tensors, all live at once.
struct SliceLoop {
  double grad_error = 0;
  int64_t peak = 0;
};

SliceLoop train_slice_loop(int layers, int64_t hidden) {
  lt::manual_seed(3);
  lt::Tensor w = (lt::randn({layers, hidden, hidden}) * (1.0f / hidden)).requires_grad_();
  lt::Tensor x = lt::randn({4, hidden});
  lt::sync({w, x});
  lt::metrics::reset_peak_memory();
  const int64_t before = lt::metrics::memory_bytes();
  lt::Tensor h = x;
  for (int l = 0; l < layers; ++l) h = h + lt::matmul(h, lt::select(w, 0, l));
  lt::sum(h).backward();
  lt::Tensor g = w.grad();
  lt::sync({g});
  SliceLoop r;
  r.peak = lt::metrics::peak_memory_bytes() - before;
  // the reference: each slice's own gradient, by the same chain rule unrolled by hand
  std::vector<lt::Tensor> hs{x};
  for (int l = 0; l < layers; ++l)
    hs.push_back(hs.back() + lt::matmul(hs.back(), lt::select(w, 0, l).detach()));
  lt::Tensor dh = lt::ones({4, hidden});
  std::vector<lt::Tensor> dw(static_cast<size_t>(layers));
  for (int l = layers - 1; l >= 0; --l) {
    lt::Tensor wl = lt::select(w, 0, l).detach();
    dw[static_cast<size_t>(l)] = lt::matmul(lt::transpose(hs[static_cast<size_t>(l)]), dh);
    dh = dh + lt::matmul(dh, lt::transpose(wl));
  }
  const std::vector<float> got = g.to_vector<float>(), want = lt::stack(dw, 0).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    r.grad_error = std::max(r.grad_error, static_cast<double>(std::fabs(got[i] - want[i])) /
                                              (1e-3 + std::fabs(want[i])));
  return r;
}

TEST(Memory, TheGradientOfManySlicesOfOneTensorCostsTheTensorsSize) {
  const int layers = 200;
  const int64_t hidden = 64, weight = layers * hidden * hidden * 4;  // 3.1 MiB
  const SliceLoop on = train_slice_loop(layers, hidden);
  EXPECT_LT(on.grad_error, 1e-4);
  EXPECT_LE(on.peak, 4 * weight) << "peak " << on.peak << " bytes for a weight of " << weight;
  // smaller, with the pass off: 50 slices
  const auto before = lt::debug::set_disabled_passes({"slice_grads"});
  const SliceLoop off = train_slice_loop(50, 32);
  lt::debug::set_disabled_passes(before);
  EXPECT_LT(off.grad_error, 1e-4);
  EXPECT_GT(off.peak, 20 * (50 * 32 * 32 * 4)) << "the pass is what keeps it small";
}

}  // namespace

namespace {

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

// MLX's leak check, exactly: after the first few training steps every later identical step
// ends holding the same bytes (weights, moments, compiled scratch), and the process's
// resident memory stays flat over 10,000 steps.
TEST(Memory, IdenticalTrainingStepsHoldExactlyTheSameBytesAndRssStaysFlat) {
  lt::manual_seed(1);
  lt::nn::DecoderLM model(tiny_decoder_config());
  lt::optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  auto [x, y] = tiny_batch();
  auto step = [&] {
    lt::Tensor loss = lt::nn::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    lt::sync();
  };
  for (int i = 0; i < 3; ++i) step();
  const int64_t bytes = lt::metrics::memory_bytes();
  for (int i = 0; i < 50; ++i) {
    step();
    ASSERT_EQ(lt::metrics::memory_bytes(), bytes) << "after step " << 4 + i;
  }
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's own bookkeeping grows the resident memory";
#endif
  for (int i = 0; i < 500; ++i) step();
  const int64_t rss = rss_bytes();
  for (int i = 0; i < 10000; ++i) step();
  EXPECT_EQ(lt::metrics::memory_bytes(), bytes);
  const int64_t growth = rss_bytes() - rss;
  EXPECT_LT(growth, int64_t{1} << 20) << "resident memory grew over 10,000 steps";
  // the figure docs/reliability.md quotes
  std::printf(
      "[ memory   ] %lld live bytes at every check; resident memory grew %lld bytes "
      "over 10,000 steps\n",
      static_cast<long long>(bytes), static_cast<long long>(growth));
}

}  // namespace
