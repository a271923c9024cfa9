// Every user mistake is an lt::Error that names the op, the shapes or dtypes, and a fix.
#include <gtest/gtest.h>

#include <cmath>

#include <lazytrace/lazytrace.h>
#include <functional>

#include "expect_error.h"

namespace {

lt::Tensor f32(lt::Shape s) {
  return lt::zeros(s);
}

TEST(Errors, BroadcastMismatch) {
  expect_error([] { (void)(f32({2, 3}) + f32({4})); }, {"[add]", "[2, 3]", "[4]", "broadcast"});
  expect_error([] { (void)lt::mul(f32({2, 3}), f32({3, 2})); }, {"[mul]", "[3, 2]"});
  expect_error([] { (void)lt::where(f32({2}) > 0, f32({3}), f32({2})); }, {"[where]"});
  expect_error(
      [] {
        (void)lt::broadcast_to(f32({3}), {2, 4});
      },
      {"[broadcast_to]", "[3]", "[2, 4]"});
}

TEST(Errors, Matmul) {
  expect_error(
      [] {
        (void)lt::matmul(f32({2, 3}), f32({4, 5}));
      },
      {"[matmul]", "[2, 3]", "[4, 5]", "not aligned"});
  expect_error([] { (void)lt::matmul(f32({2, 2, 3}), f32({3, 3, 4})); }, {"[matmul]", "broadcast"});
  expect_error([] { (void)lt::matmul(f32({}), f32({3})); }, {"[matmul]", "at least 1 dimension"});
  expect_error([] { (void)lt::matmul(f32({2}) > 0, f32({2}) > 0); }, {"[matmul]", "bool"});
}

TEST(Errors, ConcatAndStack) {
  expect_error(
      [] {
        (void)lt::concat({f32({2, 3}), f32({2, 4})}, 0);
      },
      {"[concat]", "[2, 4]", "[2, 3]", "dim 0"});
  expect_error([] { (void)lt::concat({}, 0); }, {"[concat]", "at least one"});
  expect_error([] { (void)lt::concat({f32({2}), f32({2})}, 1); }, {"[concat]", "out of range"});
  expect_error([] { (void)lt::stack({f32({2}), f32({3})}); }, {"[stack]", "[3]", "same shape"});
}

TEST(Errors, Reshape) {
  expect_error(
      [] {
        (void)lt::reshape(f32({2, 3}), {4, 2});
      },
      {"[reshape]", "[2, 3]", "[4, 2]", "6"});
  expect_error([] { (void)lt::reshape(f32({2, 3}), {-1, -1}); }, {"[reshape]", "only one"});
  expect_error([] { (void)lt::reshape(f32({2, 3}), {4, -1}); }, {"[reshape]", "divide"});
  expect_error([] { (void)lt::reshape(f32({0, 3}), {0, -1}); }, {"[reshape]", "could be any size"});
  expect_error([] { (void)lt::squeeze(f32({2, 3}), 0); }, {"[squeeze]", "size 2"});
  // an integer that does not fit the int32 operand is an error, not a wrapped value
  const lt::Tensor i32 = lt::tensor(std::vector<int32_t>{0, 1}, {2});
  expect_error([&] { (void)(i32 == int64_t{1} << 32); },
               {"[eq] the integer 4294967296 does not fit in int32"});
  expect_error([] { (void)lt::full({2}, int64_t{1} << 40, lt::int32); },
               {"[full]", "does not fit in int32"});
  EXPECT_EQ((i32 + int64_t{5}).to_vector<int32_t>(), (std::vector<int32_t>{5, 6}));
  // so is a floating number: NaN, infinite or out of range (in range it is truncated)
  for (double v : {std::nan(""), double{INFINITY}, 3e9})
    expect_error([&] { (void)lt::full({2}, v, lt::int32); },
                 {"[full] the number", "cannot be converted to int32 without overflow"});
  EXPECT_EQ(lt::full({2}, -2.7, lt::int32).to_vector<int32_t>(), (std::vector<int32_t>{-2, -2}));
  // and a finite number past a floating dtype's largest (torch's check; inf stays inf)
  for (auto [v, d] :
       {std::pair{1e6, lt::float16}, std::pair{-1e39, lt::bfloat16}, std::pair{1e39, lt::float32}})
    expect_error([&] { (void)lt::full({2}, v, d); },
                 {"[full] the number", "without overflow", "use a wider dtype"});
  EXPECT_EQ(lt::full({1}, 65504.0, lt::float16).to_vector<float>(), std::vector<float>{65504});
  EXPECT_EQ(lt::full({1}, double{INFINITY}, lt::float16).to_vector<float>(),
            std::vector<float>{INFINITY});
  // a 0-d tensor takes dim 0 and -1, as torch: itself
  const lt::Tensor s = lt::scalar(2.5f);
  EXPECT_EQ(lt::squeeze(s, 0).to_vector<float>(), std::vector<float>{2.5f});
  EXPECT_EQ(lt::squeeze(s, -1).ndim(), 0);
  EXPECT_EQ(lt::transpose(s, 0, -1).to_vector<float>(), std::vector<float>{2.5f});
  expect_error([&] { (void)lt::squeeze(s, 1); },
               {"[squeeze]", "dim 1", "expected a dim in [-1, 0]"});
}

TEST(Errors, BadDims) {
  expect_error([] { (void)lt::sum(f32({2, 3}), {2}); }, {"[sum]", "dim 2", "[2, 3]", "[-2, 1]"});
  expect_error([] { (void)lt::mean(f32({2, 3}), {0, -2}); }, {"[mean]", "more than once"});
  expect_error([] { (void)lt::softmax(f32({2, 3}), 3); }, {"[softmax]", "dim 3"});
  expect_error([] { (void)lt::transpose(f32({2, 3}), 0, 5); }, {"[transpose]", "dim 5"});
  expect_error([] { (void)lt::permute(f32({2, 3}), {0}); }, {"[permute]", "2 dims"});
  expect_error([] { (void)lt::permute(f32({2, 3}), {0, 0}); }, {"[permute]", "twice"});
  expect_error([] { (void)lt::slice(f32({2, 3}), 2, 0, 1); }, {"[slice]", "dim 2"});
  expect_error([] { (void)lt::slice(f32({2, 3}), 1, 0, 1, 0); }, {"[slice]", "step"});
  expect_error(
      [] {
        (void)lt::index_select(f32({2, 3}), 2, lt::tensor({0}));
      },
      {"[index_select]", "dim 2"});
  expect_error([] { (void)f32({2, 3}).size(2); }, {"[size]", "dim 2"});
  expect_error(
      [] {
        (void)lt::index_add(f32({2, 3}), 1, lt::tensor({0, 1}), f32({2, 3}));
      },
      {"[index_add]", "source has shape [2, 3]", "needs shape [2, 2]"});
  expect_error(
      [] {
        (void)lt::index_add(f32({2, 3}), 0, lt::tensor(std::vector<int64_t>{0}, {1, 1}),
                            f32({1, 3}));
      },
      {"[index_add]"});
  expect_error([] { (void)lt::amax(f32({0, 3}), {0}); }, {"[amax]", "size 0"});
}

TEST(Errors, BadDtypes) {
  expect_error([] { (void)lt::mean(lt::tensor({1, 2, 3})); }, {"[mean]", "i64[3]", "astype"});
  expect_error([] { (void)lt::softmax(lt::tensor({1, 2})); }, {"[softmax]", "i64[2]"});
  expect_error([] { (void)lt::where(f32({2}), f32({2}), f32({2})); },
               {"[where]", "bool", "f32[2]"});
  expect_error([] { (void)lt::index_select(f32({3}), 0, lt::tensor({0.0f})); },
               {"[index_select]", "int32 or int64"});
  expect_error([] { (void)lt::index_add(f32({3}), 0, lt::tensor({0.0f}), f32({1})); },
               {"[index_add]", "int32 or int64"});
  expect_error([] { (void)lt::index_add(f32({3}) > 0, 0, lt::tensor({0}), f32({1}) > 0); },
               {"[index_add]", "bool"});
  expect_error([] { (void)lt::neg(f32({2}) > 0); }, {"[neg]", "bool"});
  expect_error([] { (void)((f32({2}) > 0) - (f32({2}) > 0)); }, {"[sub]", "bool"});
  expect_error([] { (void)lt::randn({2}, lt::int32); }, {"[randn]", "int32"});
  expect_error([] { (void)lt::arange(0, 5, 1, lt::bool_); }, {"[arange]", "bool"});
}

TEST(Errors, ReadingOutOfRange) {
  expect_error([] { (void)lt::select(f32({2, 3}), 1, 3); }, {"[select]", "index 3", "size 3"});
  expect_error([] { (void)lt::select(f32({2, 3}), 0, -3); }, {"[select]", "index -3"});
  expect_error([] { (void)f32({2, 3}).item<float>(); }, {"[item]", "[2, 3]", "6 elements"});
  expect_error(
      [] {
        (void)lt::index_select(lt::tensor({1.0f, 2.0f}), 0, lt::tensor({0, 2})).to_vector<float>();
      },
      {"[index_select]", "index 2", "size 2"});
  expect_error(
      [] {
        (void)lt::index_add(lt::tensor({1.0f, 2.0f}), 0, lt::tensor({-3}), lt::tensor({1.0f}))
            .to_vector<float>();
      },
      {"[index_add]", "index -3", "size 2"});
}

TEST(Errors, CreationAndUndefined) {
  expect_error(
      [] {
        (void)lt::tensor(std::vector<float>{1, 2, 3}, {2, 2});
      },
      {"[tensor]", "3 values", "[2, 2]"});
  expect_error([] { (void)lt::zeros({2, -1}); }, {"[full]", "negative"});
  expect_error([] { (void)lt::arange(0, 5, 0); }, {"[arange]", "step"});
  expect_error([] { (void)lt::arange(5, 0, 1); }, {"[arange]", "empty"});
  expect_error([] { (void)(lt::Tensor() + 1.0f); }, {"[add]", "undefined"});
  expect_error([] { (void)lt::Tensor().shape(); }, {"[shape]", "undefined"});
  expect_error([] { (void)lt::Tensor().item<float>(); }, {"[item]", "undefined"});
  expect_error([] { (void)lt::arange(0, 1e19); }, {"[arange]", "more than a tensor can hold"});
  expect_error(
      [] {
        (void)lt::zeros({int64_t{1} << 40, int64_t{1} << 40});
      },
      {"[full]", "more bytes than 64 bits can count"});
  expect_error(
      [] {
        lt::Tensor t = f32({3});
        t.copy_(f32({4}));
      },
      {"[copy_]", "[4]", "[3]"});
}

TEST(Errors, AFailedSyncLeavesTensorsUsable) {
  auto idx = lt::tensor({0, 5});
  auto bad = lt::index_select(lt::tensor({1.0f, 2.0f}), 0, idx);
  EXPECT_THROW(lt::sync(), lt::Error);
  EXPECT_TRUE(bad.is_pending());
  bad = lt::Tensor();
  auto ok = lt::tensor({1.0f}) + 1.0f;
  EXPECT_EQ(ok.item<float>(), 2.0f);
}

}  // namespace

namespace {

TEST(Errors, AnImpossibleAllocationNamesTheOpTheShapeAndTheBytes) {
  // 2^50 float32 elements: 4 PiB, more than any address space holds
  lt::Tensor huge = lt::zeros({int64_t{1} << 20, int64_t{1} << 20, int64_t{1} << 10});
  expect_error([&] { (void)huge.to_vector<float>(); },
               {"cannot allocate", "4.0 PiB", "4503599627370496 bytes",
                "float32[1048576, 1048576, 1024]", "Make the tensor smaller"});
  // the failure leaves the library usable
  EXPECT_EQ((lt::ones({3}) * 2.0f).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  lt::Tensor a = lt::ones({int64_t{1} << 25, int64_t{1} << 25});  // 4 PiB again, by a product
  lt::Tensor total = lt::sum(a * 2.0f);  // (a*2 not held when it syncs: an intermediate)
  expect_error([&] { (void)total.item<float>(); },
               {"cannot allocate", "PiB", "intermediate", "float32[33554432, 33554432]"});
}

TEST(Errors, AShapeWhoseBytesOverflowSixtyFourBitsIsRefusedWhenRecorded) {
  const int64_t big = int64_t{1} << 31;
  expect_error(
      [&] {
        (void)lt::zeros({big, big, 4});
      },
      {"[2147483648, 2147483648, 4]", "float32", "64 bits"});
  lt::Tensor x = lt::zeros({big, 1});
  expect_error([&] { (void)lt::broadcast_to(x, {big, big, 8}); }, {"64 bits", "smaller"});
}

}  // namespace

namespace {

TEST(Errors, TreeMisuseNamesWhatWasExpected) {
  const lt::Tree t = lt::Tree::dict({{"a", lt::tensor({1.0f})}, {"b", lt::Tree::list({})}});
  expect_error(
      [] {
        const lt::Tensor undefined;
        const lt::Tree leaf(undefined);
      },
      {"[Tree]", "defined tensor", "Tree()"});
  expect_error(
      [] {
        (void)lt::Tree::dict({{"k", lt::Tree()}, {"k", lt::Tree()}});
      },
      {"[Tree]", "'k' appears twice"});
  expect_error([&] { (void)t.tensor(); }, {"[Tree]", "needs a leaf", "{a: *, b: []}"});
  expect_error([&] { (void)t[0]; }, {"[Tree]", "needs a list"});
  expect_error([&] { (void)t["b"][3]; }, {"[Tree]", "index 3 is out of range for a list of 0"});
  expect_error([&] { (void)t["c"]; }, {"[Tree]", "no key 'c'"});
  expect_error([&] { (void)t.with_leaves({}); }, {"[Tree]", "with_leaves got 0 tensors"});
  expect_error(
      [&] {
        (void)t.with_leaves({lt::ones({1}), lt::ones({1})});
      },
      {"[Tree]", "with_leaves got 2 tensors for a tree of 1 leaves"});
  EXPECT_EQ(t.with_leaves({lt::tensor({5.0f})})["a"].tensor().item<float>(), 5.0f);
}

// Integer bases to negative integer powers (PyTorch refuses them; the result would be 0 or
// garbage), fori_loop bounds whose count overflows int64 (it ran nothing), and a null layer
// given to scan_layers (it crashed): errors that say what to do.
TEST(Errors, NegativeIntegerPowersHugeLoopRangesAndNullLayersAreRefused) {
  expect_error(
      [] {
        lt::pow(lt::tensor(std::vector<int64_t>{2, 3}, {2}), -1);
      },
      {"[pow] integers to negative integer powers", "i64[2]", "floating dtype"});
  EXPECT_EQ(lt::pow(lt::tensor(std::vector<int64_t>{2, 3}, {2}), 2).to_vector<int64_t>(),
            (std::vector<int64_t>{4, 9}));
  EXPECT_FLOAT_EQ(lt::pow(lt::tensor({2.0f}), -1).item<float>(), 0.5f);
  auto id = [](const lt::Tensor&, const lt::Tensor& c) { return c; };
  expect_error([&] { lt::fori_loop(INT64_MIN, INT64_MAX, id, lt::zeros({1})); },
               {"[fori_loop] the range", "more than 2^63 - 1 iterations"});
  EXPECT_EQ(lt::fori_loop(5, 2, id, lt::ones({1})).item<float>(), 1.0f);  // nothing to run
  std::vector<std::shared_ptr<lt::nn::Linear>> layers{std::make_shared<lt::nn::Linear>(3, 3),
                                                      nullptr};
  expect_error(
      [&] {
        lt::nn::scan_layers(layers, lt::ones({2, 3}));
      },
      {"[scan_layers] layer 1 of 2 is null"});
}

// Found by a review against DESIGN.md's contract (2026-12-07): values that came out silently
// wrong, and messages that named the wrong thing.
TEST(Errors, ReadsThatDoNotFitAndWritesThatWouldBeLost) {
  expect_error([] { (void)lt::scalar(18446744073709551615UL); },
               {"[scalar]", "18446744073709551615", "int64"});
  expect_error([] { (void)lt::scalar(3e9f).item<int32_t>(); }, {"[item]", "f32[]", "int32"});
  expect_error([] { (void)lt::scalar(NAN).item<int64_t>(); }, {"[item]", "nan", "int64"});
  expect_error([] { (void)lt::arange(5e9, 5e9 + 2).to_vector<int32_t>(); },
               {"[to_vector]", "element 0", "int32"});
  EXPECT_EQ(lt::scalar(-2147483648.5).item<int32_t>(), INT32_MIN);  // truncated, in range
  EXPECT_EQ(lt::scalar(2147483647.0).item<int32_t>(), INT32_MAX);
  EXPECT_EQ(lt::arange(5e9, 5e9 + 2).to_vector<int64_t>()[1], 5000000001);
  EXPECT_EQ(lt::scalar(1e30).item<float>(), 1e30f);  // floating targets take any value

  auto bump = lt::assume_pure([](lt::Tensor x) {
    x.copy_(x + 1.0f);
    return x * 2.0f;
  });
  expect_error(
      [&] { (void)bump(lt::zeros({2})); },
      {"[assume_pure]", "writes in place into its tensor argument 0", "f32[2]", "compile"});
  auto cumsum = [](const lt::Tensor& c, const lt::Tensor& x) {
    lt::Tensor acc = c;
    acc.copy_(acc + x);  // the carry may be written (the spec's cumsum does)
    return std::pair{acc, acc};
  };
  EXPECT_EQ(lt::scan(cumsum, lt::zeros({1}), lt::ones({3, 1})).first.item<float>(), 3.0f);
  auto writes_x = [](const lt::Tensor& c, const lt::Tensor& x) {
    lt::Tensor v = x;
    v.copy_(v + 1.0f);
    return std::pair{c + v, c};
  };
  expect_error(
      [&] {
        (void)lt::scan(writes_x, lt::zeros({1}), lt::ones({3, 1}));
      },
      {"[scan] the body writes in place into its x", "f32[1]", "xs"});
}

TEST(Errors, MessagesNameWhatWasGiven) {
  expect_error([] { (void)lt::unsqueeze(f32({4}), 3); },
               {"[unsqueeze]", "shape [4] (1-d)", "[-2, 1]"});
  expect_error(
      [] {
        (void)lt::matmul(f32({2, 2, 3}), f32({3, 3, 2}));
      },
      {"[matmul]", "[2, 2, 3]", "[3, 3, 2]", "batch"});
  expect_error(
      [] {
        (void)lt::nn::mse_loss(f32({2, 3}), f32({3, 2}));
      },
      {"[mse_loss]", "[2, 3]", "[3, 2]"});
  lt::nn::ModuleList list;
  list.push_back(std::make_shared<lt::nn::Linear>(2, 2));
  expect_error([&] { (void)list.at<lt::nn::RMSNorm>(0); },
               {"[ModuleList]", "module 0 is a Linear", "lazytrace::nn::RMSNorm"});
}

}  // namespace
