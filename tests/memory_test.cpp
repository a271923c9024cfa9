// Sharing memory with other libraries: lt::from_blob (no copy), lt::copy_from, lt::host_data.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include <cstring>
#include <memory>
#include <vector>

#include "expect_error.h"

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

TEST(Memory, MisuseIsAnError) {
  expect_error([] { lt::from_blob(nullptr, {2}, lt::float32, nullptr); }, {"[from_blob]", "null"});
  alignas(8) char bytes[16] = {};
  expect_error([&] { lt::from_blob(bytes + 1, {2}, lt::float32, nullptr); },
               {"[from_blob]", "aligned"});
  expect_error([] { lt::host_data(lt::Tensor()); }, {"[host_data]", "undefined"});
  expect_error([] { lt::copy_from(nullptr, {3}, lt::int32); }, {"[copy_from]", "null"});
}

}  // namespace
