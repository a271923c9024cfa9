// Autocast (lazytrace/ops/autocast.h): products of float32 operands run in bfloat16 as the
// same products of explicitly cast operands do, bit for bit; gradients reach float32
// parameters in float32; the losses take float32; the state is part of the trace caches'
// key; and a decoder trains under it about as it does in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <lazytrace/core/half.h>
#include <lazytrace/lazytrace.h>

#include "expect_error.h"
#include "tiny_decoder.h"

namespace {

std::vector<float> values(const lt::Tensor& t) {
  return lt::astype(t, lt::float32).to_vector<float>();
}

}  // namespace

TEST(Autocast, ProductsRunInBfloat16AsExplicitCastsDo) {
  lt::manual_seed(1);
  lt::Tensor x = lt::randn({4, 6, 32}), w = lt::randn({24, 32});
  lt::Tensor want =
      lt::matmul(lt::astype(x, lt::bfloat16), lt::transpose(lt::astype(w, lt::bfloat16)));
  lt::Tensor got;
  {
    lt::AutocastGuard autocast;
    EXPECT_TRUE(lt::is_autocast_enabled());
    EXPECT_EQ(lt::autocast_dtype(), lt::bfloat16);
    got = lt::matmul(x, lt::transpose(w));
  }
  EXPECT_FALSE(lt::is_autocast_enabled());
  ASSERT_EQ(got.dtype(), lt::bfloat16);
  EXPECT_EQ(values(got), values(want));
  // and within bfloat16's rounding of the float64 product
  const std::vector<float> vx = x.to_vector<float>(), vw = w.to_vector<float>(), vg = values(got);
  for (int64_t r = 0; r < 24; ++r)
    for (int64_t j = 0; j < 24; ++j) {
      double ref = 0, mag = 0;
      for (int64_t q = 0; q < 32; ++q) {
        const double p = static_cast<double>(vx[static_cast<size_t>(r * 32 + q)]) *
                         vw[static_cast<size_t>(j * 32 + q)];
        ref += p;
        mag += std::abs(p);
      }
      // each operand rounded to 8 bits (2^-9 relative each), the result once more
      ASSERT_NEAR(vg[static_cast<size_t>(r * 24 + j)], ref, mag * 3 * std::ldexp(1.0, -9) + 1e-6);
    }
}

TEST(Autocast, LeavesFloat64AndIntegersAlone) {
  lt::AutocastGuard autocast;
  lt::Tensor d = lt::ones({3, 3}, lt::float64);
  EXPECT_EQ(lt::matmul(d, d).dtype(), lt::float64);
  lt::Tensor i = lt::ones({3, 3}, lt::int64);
  EXPECT_EQ(lt::matmul(i, i).dtype(), lt::int64);
  // a float32 operand beside a float64 one is cast, then promoted, as torch's autocast does
  EXPECT_EQ(lt::matmul(lt::ones({3, 3}), d).dtype(), lt::float64);
  // a float16 operand is cast too, as torch casts every floating operand but float64
  lt::Tensor h = lt::ones({3, 3}, lt::float16);
  EXPECT_EQ(lt::matmul(h, lt::ones({3, 3})).dtype(), lt::bfloat16);
  EXPECT_EQ(lt::matmul(lt::ones({3, 3}, lt::bfloat16), lt::ones({3, 3})).dtype(), lt::bfloat16);
  // elementwise ops are not cast
  EXPECT_EQ((lt::ones({3}) + lt::ones({3})).dtype(), lt::float32);
}

TEST(Autocast, NestsTurnsOffAndTakesFloat16) {
  lt::Tensor a = lt::ones({2, 2});
  lt::AutocastGuard outer;
  EXPECT_EQ(lt::matmul(a, a).dtype(), lt::bfloat16);
  {
    lt::AutocastGuard off(false);
    EXPECT_FALSE(lt::is_autocast_enabled());
    EXPECT_EQ(lt::matmul(a, a).dtype(), lt::float32);
    {
      lt::AutocastGuard half(true, lt::float16);
      EXPECT_EQ(lt::matmul(a, a).dtype(), lt::float16);
      EXPECT_EQ(lt::matmul(lt::astype(a, lt::bfloat16), a).dtype(), lt::float16);
      EXPECT_EQ(values(lt::matmul(a, a)), std::vector<float>(4, 2.0f));
    }
    EXPECT_FALSE(lt::is_autocast_enabled());
  }
  EXPECT_EQ(lt::autocast_dtype(), lt::bfloat16);
  EXPECT_EQ(lt::matmul(a, a).dtype(), lt::bfloat16);
}

TEST(Autocast, RefusesOtherDtypesAndLeavesTheStateAsItWas) {
  expect_error([] { lt::AutocastGuard guard(true, lt::float64); },
               "[autocast] dtype must be bfloat16 or float16 (the products' lower precision), "
               "got float64.");
  EXPECT_FALSE(lt::is_autocast_enabled());
  EXPECT_EQ(lt::autocast_dtype(), lt::bfloat16);
}

// Gradients through the casts: a float32 weight's gradient is float32 and equals the one
// computed with explicit casts, backward run outside the guard as torch users do.
TEST(Autocast, GradientsReachFloat32ParametersInFloat32) {
  lt::manual_seed(2);
  lt::Tensor x = lt::randn({8, 16});
  lt::Tensor w = lt::randn({16, 4}).requires_grad_();
  lt::Tensor loss;
  {
    lt::AutocastGuard autocast;
    loss = lt::sum(lt::astype(lt::matmul(x, w), lt::float32) * lt::arange(4.0, lt::float32));
  }
  loss.backward();
  ASSERT_EQ(w.grad().dtype(), lt::float32);
  const std::vector<float> got = w.grad().to_vector<float>();

  lt::Tensor w2 = lt::astype(w.detach(), lt::float32).requires_grad_();
  lt::Tensor y = lt::matmul(lt::astype(x, lt::bfloat16), lt::astype(w2, lt::bfloat16));
  lt::sum(lt::astype(y, lt::float32) * lt::arange(4.0, lt::float32)).backward();
  EXPECT_EQ(got, w2.grad().to_vector<float>());
  // d/dw[i][j] = sum_r x[r][i] * j, with x rounded to bfloat16, the gradient rounded once
  const std::vector<float> vx = x.to_vector<float>();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 4; ++j) {
      double ref = 0;
      for (int r = 0; r < 8; ++r)
        ref += static_cast<double>(lt::BFloat16(vx[static_cast<size_t>(r * 16 + i)])) * j;
      ASSERT_NEAR(got[static_cast<size_t>(i * 4 + j)], ref,
                  std::abs(ref) * std::ldexp(1.0, -8) + 1e-6);
    }
}

TEST(Autocast, LossesTakeFloat32) {
  lt::manual_seed(3);
  lt::Tensor logits = lt::astype(lt::randn({5, 7}), lt::bfloat16);
  lt::Tensor targets = lt::tensor(std::vector<int64_t>{0, 6, 3, 3, 1}, {5});
  lt::Tensor want = lt::nn::cross_entropy(lt::astype(logits, lt::float32), targets);
  lt::AutocastGuard autocast;
  lt::Tensor got = lt::nn::cross_entropy(logits, targets);
  ASSERT_EQ(got.dtype(), lt::float32);
  EXPECT_EQ(got.item<float>(), want.item<float>());
  EXPECT_EQ(lt::nn::nll_loss(lt::log_softmax(logits, -1), targets).dtype(), lt::float32);
  EXPECT_EQ(lt::nn::mse_loss(logits, lt::zeros({5, 7}, lt::bfloat16)).dtype(), lt::float32);
}

// A function traced outside autocast is traced again inside it (its casts are part of the
// trace), and each trace is reused after.
TEST(Autocast, IsPartOfTheTraceCachesKey) {
  int traces = 0;
  auto f = lt::assume_pure([&traces](const lt::Tensor& a, const lt::Tensor& b) {
    ++traces;
    return lt::matmul(a, b);
  });
  lt::Tensor a = lt::ones({4, 4}), b = lt::full({4, 4}, 0.5);
  EXPECT_EQ(f(a, b).dtype(), lt::float32);
  {
    lt::AutocastGuard autocast;
    lt::Tensor y = f(a, b);
    EXPECT_EQ(y.dtype(), lt::bfloat16);
    EXPECT_EQ(values(y), std::vector<float>(16, 2.0f));
    EXPECT_EQ(f(a, b).dtype(), lt::bfloat16);
  }
  EXPECT_EQ(f(a, b).dtype(), lt::float32);
  EXPECT_EQ(traces, 2);

  int scan_traces = 0;
  auto step = [&scan_traces](const lt::Tensor& h, const lt::Tensor& w) {
    ++scan_traces;
    return std::pair{h + lt::astype(lt::matmul(h, w), lt::float32), h};
  };
  lt::Tensor ws = lt::full({3, 4, 4}, 0.25);
  for (int i = 0; i < 2; ++i) {
    lt::AutocastGuard autocast(i == 1);
    auto [h, ys] = lt::scan(step, lt::ones({2, 4}), ws, {.is_fn_pure = true});
    EXPECT_EQ(values(h), std::vector<float>(8, 8.0f));  // (1 + 1)^3, exact in bfloat16
  }
  EXPECT_EQ(scan_traces, 2);
}

// The tiny decoder trained 30 steps with AdamW under autocast: its losses follow the
// float32 run's (bfloat16 products: about 3 significant digits) and fall as far.
TEST(Autocast, ADecoderTrainsAsInFloat32) {
  auto train = [](bool autocast) {
    lt::manual_seed(0);
    lt::nn::DecoderLM lm(tiny_decoder_config());
    lt::optim::AdamW opt(lm.parameters(), {.lr = 0.02});
    auto [tokens, targets] = tiny_batch();
    std::vector<float> losses;
    for (int step = 0; step < 30; ++step) {
      lt::Tensor loss;
      {
        lt::AutocastGuard guard(autocast);
        loss = lt::nn::cross_entropy(lm(tokens), targets);
      }
      EXPECT_EQ(loss.dtype(), lt::float32);
      loss.backward();
      opt.step();
      opt.zero_grad();
      lt::sync();
      losses.push_back(loss.item<float>());
    }
    for (const lt::Tensor& p : lm.parameters()) EXPECT_EQ(p.dtype(), lt::float32);
    return losses;
  };
  const std::vector<float> f32 = train(false), bf16 = train(true);
  EXPECT_NEAR(bf16[0], f32[0], 0.01 * f32[0]);
  for (size_t i = 0; i < f32.size(); ++i)
    EXPECT_NEAR(bf16[i], f32[i], 0.05 * f32[0]) << "step " << i;
  EXPECT_LT(bf16.back(), 0.5 * bf16.front());
}

// nn::Linear under autocast casts its weight (as stored) and its bias, as torch's linear:
// the result is bfloat16 and equals the layer on explicitly cast tensors.
TEST(Autocast, LinearCastsItsWeightAndBias) {
  lt::manual_seed(4);
  lt::nn::Linear layer(16, 8);
  lt::Tensor x = lt::randn({3, 16});
  lt::Tensor want = lt::matmul(lt::astype(x, lt::bfloat16),
                               lt::transpose(lt::astype(layer.weight, lt::bfloat16))) +
                    lt::astype(layer.bias, lt::bfloat16);
  lt::AutocastGuard autocast;
  lt::Tensor got = layer(x);
  ASSERT_EQ(got.dtype(), lt::bfloat16);
  EXPECT_EQ(values(got), values(want));
}

// A cached function's backward is traced when a backward first reaches it, usually after the
// guard has ended: it runs under the autocast state its forward was traced with, so the
// gradients are those of the bfloat16 products that ran (found in review: they were traced
// without autocast, and wrong).
TEST(Autocast, ACachedFunctionsBackwardRunsUnderItsForwardsState) {
  lt::manual_seed(6);
  lt::Tensor x = lt::randn({8, 16});
  lt::Tensor w0 = lt::randn({16, 4});
  lt::sync({x, w0});
  auto eager_grad = [&] {
    lt::Tensor w = (w0 * 1.0f).requires_grad_();  // a leaf of its own
    lt::Tensor y = lt::matmul(lt::astype(x, lt::bfloat16), lt::astype(w, lt::bfloat16));
    lt::sum(lt::astype(y, lt::float32) * lt::arange(4.0, lt::float32)).backward();
    return w.grad().to_vector<float>();
  };
  const std::vector<float> want = eager_grad();
  auto product = [](const lt::Tensor& a, const lt::Tensor& b) { return lt::matmul(a, b); };
  auto pure = lt::assume_pure(product);
  auto compiled = lt::compile(product);
  for (int tool = 0; tool < 2; ++tool) {
    lt::Tensor w = (w0 * 1.0f).requires_grad_();
    lt::Tensor y;
    {
      lt::AutocastGuard autocast;
      y = tool == 0 ? pure(x, w) : compiled(x, w);
    }
    ASSERT_EQ(y.dtype(), lt::bfloat16);
    lt::sum(lt::astype(y, lt::float32) * lt::arange(4.0, lt::float32)).backward();
    EXPECT_EQ(w.grad().to_vector<float>(), want) << (tool == 0 ? "assume_pure" : "compile");
  }
}

// Threads as ranks: every rank records under the caller's state (rank 0 is the caller's
// thread), so their graphs and collectives agree.
TEST(Autocast, ThreadRanksRecordUnderTheCallersState) {
  lt::AutocastGuard autocast(true, lt::float16);
  std::vector<int> seen(3, 0);
  lt::dist::run_threads(3, [&](int rank) {
    lt::Tensor y = lt::all_reduce(lt::matmul(lt::ones({2, 2}), lt::ones({2, 2})));
    seen[static_cast<size_t>(rank)] =
        lt::is_autocast_enabled() && lt::autocast_dtype() == lt::float16 &&
        y.dtype() == lt::float16 && values(y) == std::vector<float>(4, 6.0f);
  });
  EXPECT_EQ(seen, std::vector<int>(3, 1));
  EXPECT_EQ(lt::autocast_dtype(), lt::float16);
}

// The backward's products run in the forward's dtype, never cast again: a function that turns
// autocast off inside gets float32 gradients, compiled or not, and a backward run inside an
// autocast block gives what it gives outside (found in review).
TEST(Autocast, BackwardProductsAreNeverCastAgain) {
  lt::manual_seed(7);
  lt::Tensor x0 = lt::randn({8, 16}), w0 = lt::randn({16, 4});
  lt::sync({x0, w0});
  auto off_inside = [](const lt::Tensor& a, const lt::Tensor& b) {
    lt::AutocastGuard off(false);
    return lt::matmul(a, b);
  };
  auto grad_of = [&](const std::function<lt::Tensor(const lt::Tensor&, const lt::Tensor&)>& f,
                     bool backward_under_autocast) {
    lt::Tensor x = (x0 * 1.0f).requires_grad_();
    lt::AutocastGuard autocast;
    lt::Tensor y = f(x, w0);
    lt::Tensor loss = lt::sum(lt::astype(y, lt::float32) * lt::arange(4.0, lt::float32));
    lt::AutocastGuard during(backward_under_autocast);
    loss.backward();
    return x.grad().to_vector<float>();
  };
  // float32 throughout: x.grad = (d loss / dy) wᵀ in float32
  const std::vector<float> want = [&] {
    lt::Tensor x = (x0 * 1.0f).requires_grad_();
    lt::sum(lt::matmul(x, w0) * lt::arange(4.0, lt::float32)).backward();
    return x.grad().to_vector<float>();
  }();
  EXPECT_EQ(grad_of(off_inside, false), want) << "eager";
  EXPECT_EQ(grad_of(lt::assume_pure(off_inside), false), want) << "assume_pure";
  EXPECT_EQ(grad_of(lt::compile(off_inside), false), want) << "compile";
  // a bfloat16 forward: the same gradients with backward inside the block or outside
  auto product = [](const lt::Tensor& a, const lt::Tensor& b) { return lt::matmul(a, b); };
  EXPECT_EQ(grad_of(product, true), grad_of(product, false));
  EXPECT_EQ(grad_of(lt::compile(product), false), grad_of(product, false));
}
