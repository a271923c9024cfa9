// Data-parallel training of the tiny decoder with threads as ranks, against one process
// that accumulates the gradients of the same examples (bit for bit at 2 ranks) and one
// process on the whole global batch at once (within 1e-5).
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>

#include <map>
#include <mutex>

#include "expect_error.h"
#include "tiny_decoder.h"

namespace {

using lt::Tensor;

constexpr int64_t kSeq = 3, kSteps = 4;

// The global batch of step s: 8 sequences of next-token pairs.
std::pair<Tensor, Tensor> global_batch(int s) {
  std::vector<int64_t> x, y;
  for (int64_t b = 0; b < 8; ++b)
    for (int64_t t = 0; t < kSeq; ++t) {
      x.push_back((5 * b + 3 * t + 7 * s) % 16);
      y.push_back((5 * b + 3 * t + 7 * s + 1 + b % 3) % 16);
    }
  return {lt::tensor(x, {8, kSeq}), lt::tensor(y, {8, kSeq})};
}

std::pair<Tensor, Tensor> rows(const std::pair<Tensor, Tensor>& batch, int64_t begin, int64_t end) {
  return {lt::slice(batch.first, 0, begin, end), lt::slice(batch.second, 0, begin, end)};
}

struct Trained {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> weights;
};

lt::nn::DecoderConfig config(bool stacked) {
  lt::nn::DecoderConfig c = tiny_decoder_config();
  c.stacked_layers = stacked;  // the layers as one scan over stacked weights
  return c;
}

// A model with the same initial weights on every call (made once, on this thread).
std::shared_ptr<lt::nn::DecoderLM> fresh_model(bool stacked = false) {
  static std::map<bool, std::map<std::string, std::vector<float>>> inits;
  static std::mutex mu;
  std::unique_lock<std::mutex> lock(mu);
  if (!inits.count(stacked)) {
    lt::manual_seed(5);
    lt::nn::DecoderLM m(config(stacked));
    for (const auto& [name, t] : m.named_parameters()) inits[stacked][name] = t.to_vector<float>();
  }
  const std::map<std::string, std::vector<float>>& init = inits[stacked];
  lock.unlock();
  auto m = std::make_shared<lt::nn::DecoderLM>(config(stacked));
  if (stacked) m->layers_mode = lt::nn::LayersMode::scan;
  lt::NoGradGuard no_grad;
  for (const auto& [name, t] : m->named_parameters()) {
    Tensor dst = t;
    dst.copy_(lt::tensor(init.at(name), t.shape()));
  }
  return m;
}

Trained weights_of(const lt::nn::Module& m, std::vector<float> losses) {
  Trained out{std::move(losses), {}};
  for (const auto& [name, t] : m.named_parameters()) out.weights[name] = t.to_vector<float>();
  return out;
}

// One process: each step's gradient summed over `micro` slices of the batch, then scaled
// (and clipped to the norm `clip`, if positive).
Trained accumulated(int micro, bool stacked = false, double clip = 0) {
  auto model = fresh_model(stacked);
  lt::optim::AdamW opt(model->parameters(), {.lr = 0.05});
  std::vector<float> losses;
  for (int s = 0; s < kSteps; ++s) {
    const auto batch = global_batch(s);
    const int64_t per = 8 / micro;
    float loss = 0;
    for (int m = 0; m < micro; ++m) {
      auto [x, y] = rows(batch, m * per, (m + 1) * per);
      Tensor l = lt::nn::cross_entropy((*model)(x), y);
      l.backward();
      loss += l.item<float>();
    }
    for (Tensor& p : model->parameters()) p.set_grad(p.grad() * static_cast<float>(1.0 / micro));
    if (clip > 0) lt::nn::clip_grad_norm_(model->parameters(), clip);
    opt.step();
    opt.zero_grad();
    lt::sync();
    losses.push_back(loss * static_cast<float>(1.0 / micro));
  }
  return weights_of(*model, losses);
}

// n thread ranks, each on its shard of the global batch; rank 0's result, after checking
// that every rank ends with the same weights and losses.
Trained data_parallel(int n, bool compiled, lt::dist::DataParallelOptions options = {},
                      bool stacked = false, double clip = 0) {
  std::vector<Trained> all(static_cast<size_t>(n));
  std::mutex mu;
  lt::dist::run_threads(n, [&](int r) {
    auto model = fresh_model(stacked);
    lt::dist::DataParallel dp(*model, options);
    lt::optim::AdamW opt(dp.parameters(), {.lr = 0.05});
    auto train_step = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = lt::nn::cross_entropy((*model)(x), y);
      loss.backward();
      dp.reduce_gradients();
      if (clip > 0) dp.clip_grad_norm_(clip);
      opt.step();
      dp.gather_parameters();
      opt.zero_grad();
      return dp.average(loss);
    };
    auto step =
        lt::compile(train_step, {.name = "dp_step" + std::to_string(n) +
                                         (options.shard_optimizer ? "_zero1" : "") +
                                         (stacked ? "_stacked" : "") + (clip > 0 ? "_clip" : "")});
    std::vector<float> losses;
    for (int s = 0; s < kSteps; ++s) {
      auto [begin, end] = lt::dist::shard(8);
      auto [x, y] = rows(global_batch(s), begin, end);
      Tensor loss;
      if (compiled) {
        loss = step(x, y);
      } else {
        loss = train_step(x, y);
        lt::sync();
      }
      losses.push_back(loss.item<float>());
    }
    Trained mine = weights_of(*model, losses);
    std::lock_guard<std::mutex> lock(mu);
    all[static_cast<size_t>(r)] = std::move(mine);
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(all[static_cast<size_t>(r)].losses, all[0].losses) << "rank " << r;
    EXPECT_EQ(all[static_cast<size_t>(r)].weights, all[0].weights) << "rank " << r;
  }
  return all[0];
}

void expect_equal(const Trained& a, const Trained& b) {
  EXPECT_EQ(a.losses, b.losses);
  for (const auto& [name, w] : a.weights) EXPECT_EQ(w, b.weights.at(name)) << name;
}

void expect_near(const Trained& a, const Trained& b, double rel) {
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], rel * std::abs(b.losses[i])) << "step " << i;
  for (const auto& [name, w] : a.weights) {
    const std::vector<float>& v = b.weights.at(name);
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_NEAR(w[i], v[i], rel * std::max(1.f, std::abs(v[i]))) << name << "[" << i << "]";
  }
}

TEST(DataParallel, TwoRanksEqualGradientAccumulationBitForBit) {
  const Trained reference = accumulated(2);
  expect_equal(data_parallel(2, false), reference);
  EXPECT_LT(reference.losses.back(), reference.losses.front());
}

TEST(DataParallel, CompiledStepIsOneGraphAndTrainsLikeAccumulation) {
  const Trained dp = data_parallel(2, true);
  expect_near(dp, accumulated(2), 1e-5);
  EXPECT_EQ(lt::metrics::counter("CompileCount[dp_step2]"), 2);  // once per rank
  EXPECT_EQ(lt::metrics::counter("ExecuteCount[dp_step2]"), 2 * kSteps);
}

TEST(DataParallel, FourRanksEqualOneProcessOnTheWholeBatch) {
  const Trained dp = data_parallel(4, false);
  expect_near(dp, accumulated(1), 1e-5);
  expect_near(dp, accumulated(4), 1e-5);
}

// Clipping the reduced gradients (ZeRO-1: by the norm of the ranks' parts all-reduced) clips
// as one process does on the whole batch.
TEST(DataParallel, ClippingTheReducedGradientsClipsAsOneProcess) {
  const double clip = 0.05;
  const Trained reference = accumulated(1, false, clip);
  EXPECT_NE(reference.weights, accumulated(1).weights);  // the norm is above 0.05
  lt::dist::DataParallelOptions replicated, zero1;
  zero1.shard_optimizer = true;
  zero1.bucket_bytes = 256;
  for (const auto& options : {replicated, zero1})
    for (bool compiled : {false, true})
      expect_near(data_parallel(2, compiled, options, false, clip), reference, 1e-5);
}

TEST(DataParallel, SmallBucketsGiveTheSameResult) {
  const Trained one_bucket = data_parallel(2, false);
  lt::dist::DataParallelOptions small;
  small.bucket_bytes = 256;
  expect_equal(data_parallel(2, false, small), one_bucket);
}

// The overlap_collectives pass: collectives start as soon as their data exist, the
// all-reduces of a scan's stacked gradients a layer at a time inside the backward loop,
// and are waited for where their results are read. The sums are the same, so the bits are.
TEST(DataParallel, CollectivesOverlapTheBackwardWithTheSameBits) {
  const int64_t in_loops = lt::metrics::counter("CollectivesInLoops"),
                ahead = lt::metrics::counter("CollectivesAhead");
  lt::dist::DataParallelOptions one, small, mixed, zero1;
  small.bucket_bytes = 64;   // most parameters alone
  mixed.bucket_bytes = 600;  // buckets that concatenate several gradients
  zero1.shard_optimizer = true;
  zero1.bucket_bytes = 32;  // 8 floats: every parameter alone
  for (const auto& options : {one, small, mixed, zero1})
    for (bool compiled : {false, true}) {
      const Trained overlapped = data_parallel(2, compiled, options, true);
      const std::vector<std::string> was = lt::debug::set_disabled_passes({"overlap_collectives"});
      const Trained blocking = data_parallel(2, compiled, options, true);
      lt::debug::set_disabled_passes(was);
      expect_equal(overlapped, blocking);
      if (!compiled) expect_equal(overlapped, accumulated(2, true));
    }
  EXPECT_GT(lt::metrics::counter("CollectivesInLoops"), in_loops);
  EXPECT_GT(lt::metrics::counter("CollectivesAhead"), ahead);
}

// With reduce_dtype each gradient is cast as it is copied into its bucket: the cast of a
// scan's stacked gradient is then done by the collective's own part, a layer at a time
// inside the backward loop (or, for ZeRO-1's one reduce-scatter, once its last layer is
// made), and the bits are those of the casts and collectives after the loop. (One bucket of
// every gradient holds the embedding's too, made after the loop: it cannot start there.)
TEST(DataParallel, GradientsCastToTheirReduceDtypeStillOverlapTheBackward) {
  lt::dist::DataParallelOptions one, mixed, alone, zero1, zero1_alone;
  mixed.bucket_bytes = 600;  // buckets that concatenate several gradients
  alone.bucket_bytes = 64;   // most parameters alone
  zero1.shard_optimizer = zero1_alone.shard_optimizer = true;
  zero1_alone.bucket_bytes = 32;  // 8 floats: every parameter alone
  for (auto options : {one, mixed, alone, zero1, zero1_alone})
    for (lt::DType d : {lt::bfloat16, lt::float16})
      for (int n : {2, 4}) {
        options.reduce_dtype = d;
        const int64_t in_loops = lt::metrics::counter("CollectivesInLoops");
        const Trained overlapped = data_parallel(n, true, options, true);
        if (options.bucket_bytes < 1000) {
          EXPECT_GT(lt::metrics::counter("CollectivesInLoops"), in_loops)
              << "bucket_bytes " << options.bucket_bytes << ", ZeRO-1 " << options.shard_optimizer
              << ", " << n << " ranks";
        }
        const std::vector<std::string> was =
            lt::debug::set_disabled_passes({"overlap_collectives"});
        const Trained blocking = data_parallel(n, true, options, true);
        lt::debug::set_disabled_passes(was);
        expect_equal(overlapped, blocking);
        EXPECT_LT(overlapped.losses.back(), overlapped.losses.front());
      }
}

// updates_last moves an update after the steps that read its weight, past the all-reduces
// and reduce-scatters between them: the same collectives in the same order on every rank,
// and the same bits as without it.
TEST(DataParallel, UpdatesAfterTheirWeightsReadersKeepTheBits) {
  lt::dist::DataParallelOptions replicated, zero1;
  zero1.shard_optimizer = true;
  for (const auto& options : {replicated, zero1}) {
    const Trained moved = data_parallel(2, false, options);
    const std::vector<std::string> was = lt::debug::set_disabled_passes({"updates_last"});
    const Trained kept = data_parallel(2, false, options);
    lt::debug::set_disabled_passes(was);
    expect_equal(moved, kept);
  }
}

// Dropout keyed by the global example index: after lt::dist::shard, a rank's mask of an
// example is the one a single process masking the whole batch draws for it, at 2 and 3
// ranks, and the generator moves past the whole batch's draw on every rank.
TEST(DataParallel, DropoutMasksAnExampleAsOneProcessWould) {
  const Tensor x = lt::reshape(lt::arange(1, 25, 1, lt::DType::float32), {6, 4});
  lt::nn::Dropout drop(0.5);
  lt::manual_seed(9);
  lt::set_batch_rows({});
  const std::vector<float> whole = drop(x).to_vector<float>(),
                           next = lt::rand({3}).to_vector<float>();
  size_t zeros = 0;
  for (float v : whole) zeros += v == 0;
  EXPECT_GT(zeros, 0u);
  EXPECT_LT(zeros, whole.size());
  std::mutex mu;  // the ranks share this process's generator: one draws at a time
  for (int n : {2, 3})
    lt::dist::run_threads(n, [&](int) {
      const auto [begin, end] = lt::dist::shard(6);
      std::lock_guard<std::mutex> lock(mu);
      lt::manual_seed(9);
      const std::vector<float> mine = drop(lt::slice(x, 0, begin, end)).to_vector<float>();
      EXPECT_EQ(mine, std::vector<float>(whole.begin() + begin * 4, whole.begin() + end * 4));
      EXPECT_EQ(lt::rand({3}).to_vector<float>(), next);
      // the rows of a draw of the whole, explicitly
      lt::manual_seed(9);
      const Tensor u = lt::rand({6, 4});
      lt::manual_seed(9);
      EXPECT_EQ(lt::rand_rows({end - begin, 4}, begin, 6).to_vector<float>(),
                lt::slice(u, 0, begin, end).to_vector<float>());
    });
  lt::set_batch_rows({});
  expect_error([] { lt::rand_rows({3, 4}, 4, 6); }, {"[rand_rows]", "rows [4, 7)", "6 rows"});
  expect_error([] { lt::set_batch_rows({.first = 2, .count = 5, .total = 6}); },
               {"[set_batch_rows]", "rows [2, 7)"});
}

// Activations flattened example-major ([B * T, H]) are masked as one process would too; in
// a sequence-first layout ([T, B, H]) the ranks' masks at least differ (not one draw each).
TEST(DataParallel, DropoutOfFlattenedOrSequenceFirstActivations) {
  const Tensor x = lt::reshape(lt::arange(1, 49, 1, lt::DType::float32), {4, 3, 4});  // B T H
  lt::nn::Dropout drop(0.5);
  lt::manual_seed(9);
  lt::set_batch_rows({});
  const std::vector<float> whole = drop(lt::reshape(x, {12, 4})).to_vector<float>();
  std::mutex mu;
  std::vector<std::vector<float>> seq_first(2);
  lt::dist::run_threads(2, [&](int r) {
    const auto [begin, end] = lt::dist::shard(4);
    std::lock_guard<std::mutex> lock(mu);
    lt::manual_seed(9);
    const Tensor mine = lt::slice(x, 0, begin, end);
    EXPECT_EQ(drop(lt::reshape(mine, {6, 4})).to_vector<float>(),
              std::vector<float>(whole.begin() + begin * 12, whole.begin() + end * 12));
    lt::manual_seed(9);
    const Tensor ones = lt::ones({3, 2, 4});  // [T, B, H]: each rank the same values
    seq_first[size_t(r)] = drop(ones).to_vector<float>();
  });
  lt::set_batch_rows({});
  EXPECT_NE(seq_first[0], seq_first[1]);
}

// The same inside a loop traced once (is_fn_pure): its body holds the rows' offset, so each
// thread rank traces its own instead of reusing another rank's body.
TEST(DataParallel, DropoutInsideATracedLoopMasksAsOneProcessWould) {
  const Tensor x = lt::reshape(lt::arange(1, 25, 1, lt::DType::float32), {6, 4});
  const lt::nn::Dropout drop(0.5);
  const auto body = [&drop](const Tensor& h, const Tensor& step) {
    Tensor next = drop(h) + step;
    return std::make_pair(next, next);
  };
  auto run = [&](const Tensor& rows) {
    return lt::scan(body, rows, lt::ones({3, 1}), {.is_fn_pure = true}).first.to_vector<float>();
  };
  lt::manual_seed(9);
  lt::set_batch_rows({});
  const std::vector<float> whole = run(x);
  std::mutex mu;  // the ranks share this process's generator: one draws at a time
  lt::dist::run_threads(2, [&](int) {
    const auto [begin, end] = lt::dist::shard(6);
    std::lock_guard<std::mutex> lock(mu);
    lt::manual_seed(9);
    EXPECT_EQ(run(lt::slice(x, 0, begin, end)),
              std::vector<float>(whole.begin() + begin * 4, whole.begin() + end * 4));
  });
  lt::set_batch_rows({});
}

// ZeRO-1: the optimizer on each rank's shards, the parameters all-gathered; AdamW is
// elementwise and the shards are reduced in the same order, so the same bits as without.
TEST(DataParallel, ShardedOptimizerTrainsExactlyLikeTheReplicatedOne) {
  lt::dist::DataParallelOptions zero1;
  zero1.shard_optimizer = true;
  zero1.bucket_bytes = 1024;  // several buckets, some with padding
  lt::dist::DataParallelOptions alone = zero1;
  alone.bucket_bytes = 100;  // 25 floats: most parameters alone
  for (int n : {1, 2, 4}) {
    const Trained replicated = data_parallel(n, false);
    expect_equal(data_parallel(n, false, zero1), replicated);
    expect_equal(data_parallel(n, false, alone), replicated);
    expect_equal(data_parallel(n, true, zero1), data_parallel(n, true));
  }
}

// Weights, losses and the whole optimizer state (DataParallel::optimizer_state) after a run.
struct Checkpoint {
  Trained trained;
  std::map<std::string, std::map<std::string, std::vector<double>>> state;
};

// n thread ranks (ZeRO-1 with `zero1`, in several buckets, some padded) train steps
// [first, last) of the global batches, from `from` (loaded with load_optimizer_state) or
// from the fresh model; rank 0's result, after checking every rank gathered the same state.
Checkpoint train_range(int n, bool zero1, int first, int last, const Checkpoint* from) {
  std::vector<Checkpoint> all(static_cast<size_t>(n));
  lt::dist::run_threads(n, [&](int r) {
    auto model = fresh_model();
    if (from) {
      lt::NoGradGuard no_grad;
      for (const auto& [name, t] : model->named_parameters()) {
        Tensor dst = t;
        dst.copy_(lt::tensor(from->trained.weights.at(name), t.shape()));
      }
    }
    lt::dist::DataParallel dp(*model, {.bucket_bytes = 1024, .shard_optimizer = zero1});
    lt::optim::AdamW opt(dp.parameters(), {.lr = 0.05});
    if (from) {
      lt::dist::DataParallel::OptimizerState state;
      const lt::nn::ParamMap params = model->named_parameters();
      for (const auto& [name, entries] : from->state)
        for (const auto& [key, v] : entries)
          state[name][key] = key == "step"
                                 ? lt::tensor(v, {})
                                 : lt::astype(lt::tensor(v, params.at(name).shape()), lt::float32);
      dp.load_optimizer_state(opt, state);
    }
    std::vector<float> losses;
    for (int s = first; s < last; ++s) {
      auto [begin, end] = lt::dist::shard(8);
      auto [x, y] = rows(global_batch(s), begin, end);
      Tensor loss = lt::nn::cross_entropy((*model)(x), y);
      loss.backward();
      dp.reduce_gradients();
      opt.step();
      dp.gather_parameters();
      opt.zero_grad();
      losses.push_back(dp.average(loss).item<float>());
    }
    Checkpoint& mine = all[static_cast<size_t>(r)];
    for (const auto& [name, entries] : dp.optimizer_state(opt))  // every rank takes part
      for (const auto& [key, t] : entries)
        mine.state[name][key] = lt::astype(t, lt::float64).to_vector<double>();
    mine.trained = weights_of(*model, losses);
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(all[static_cast<size_t>(r)].state, all[0].state);
  return all[0];
}

TEST(DataParallel, WholeOptimizerStateResumesOnAnyNumberOfRanksShardedOrNot) {
  const Checkpoint whole = train_range(2, true, 0, kSteps, nullptr);
  const Checkpoint half = train_range(2, true, 0, 2, nullptr);
  // the shards' state gathered is the replicated optimizer's, bit for bit
  EXPECT_EQ(half.state, train_range(2, false, 0, 2, nullptr).state);
  ASSERT_EQ(half.state.size(), fresh_model()->named_parameters().size());
  EXPECT_EQ(half.state.begin()->second.at("step"), std::vector<double>{2});
  Trained rest = whole.trained;
  rest.losses.erase(rest.losses.begin(), rest.losses.begin() + 2);
  // resumed as it was written, or replicated: the uninterrupted run exactly
  for (bool zero1 : {true, false}) {
    const Checkpoint resumed = train_range(2, zero1, 2, kSteps, &half);
    expect_equal(resumed.trained, rest);
    EXPECT_EQ(resumed.state, whole.state);
  }
  // on 4 ranks, or one process: the same steps, summed in another order
  for (auto [n, zero1] : {std::pair{4, true}, std::pair{1, false}, std::pair{1, true}})
    expect_near(train_range(n, zero1, 2, kSteps, &half).trained, rest, 1e-5);
}

TEST(DataParallel, OptimizerStateNeedsTheOptimizerOverItsParametersAndEveryName) {
  lt::dist::run_threads(2, [](int) {
    auto model = fresh_model();
    lt::dist::DataParallel dp(*model, {.shard_optimizer = true});
    lt::optim::AdamW other(model->parameters());
    expect_error([&] { dp.optimizer_state(other); },
                 {"optimizer_state", "not one of this DataParallel's shards", "dp.parameters()"});
    lt::optim::AdamW opt(dp.parameters());
    auto state = dp.optimizer_state(opt);
    const std::string gone = state.begin()->first;
    state.erase(gone);
    expect_error([&] { dp.load_optimizer_state(opt, state); },
                 {"load_optimizer_state", ("no state for parameter '" + gone + "'").c_str()});
  });
}

// One process's reference for n ranks whose gradients are reduced in `d`: each n-th of the
// batch's gradient rounded to d, their mean taken in float32 and rounded to d, then AdamW.
Trained accumulated_in(lt::DType d, int n) {
  auto model = fresh_model();
  const std::vector<Tensor> params = model->parameters();
  lt::optim::AdamW opt(params, {.lr = 0.05});
  const auto rounded = [d](const Tensor& t) { return lt::astype(lt::astype(t, d), lt::float32); };
  std::vector<float> losses;
  for (int s = 0; s < kSteps; ++s) {
    const auto batch = global_batch(s);
    std::vector<Tensor> sums(params.size());
    float loss = 0;
    const int64_t per = 8 / n;
    for (int64_t part = 0; part < n; ++part) {
      auto [x, y] = rows(batch, part * per, part * per + per);
      Tensor l = lt::nn::cross_entropy((*model)(x), y);
      l.backward();
      loss += l.item<float>();
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor p = params[i];
        sums[i] = part == 0 ? rounded(p.grad()) : sums[i] + rounded(p.grad());
        p.set_grad(Tensor());
      }
    }
    const auto mean = static_cast<float>(1.0 / n);
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor p = params[i];
      p.set_grad(rounded(n == 1 ? sums[i] : sums[i] * mean));
    }
    opt.step();
    opt.zero_grad();
    lt::sync();
    losses.push_back(n == 1 ? loss : loss * mean);
  }
  return weights_of(*model, losses);
}

TEST(DataParallel, GradientsReducedInBfloat16AreEachRanksRoundedAndTheirMeanRounded) {
  for (int n : {1, 2}) {  // (one rank rounds alike)
    const Trained reference = accumulated_in(lt::bfloat16, n);
    expect_equal(data_parallel(n, false, {.reduce_dtype = lt::bfloat16}), reference);
    expect_equal(data_parallel(n, false, {.shard_optimizer = true, .reduce_dtype = lt::bfloat16}),
                 reference);
    EXPECT_NE(reference.weights, accumulated(n).weights);  // not what float32 gives
    EXPECT_LT(reference.losses.back(), reference.losses.front());
  }
  expect_error(
      [] {
        auto model = fresh_model();
        lt::dist::DataParallel dp(*model, {.reduce_dtype = lt::int32});
      },
      {"[DataParallel]", "reduce_dtype must be a floating dtype", "int32"});
}

TEST(DataParallel, ShardsHoldOneRanksPartOfEveryBucket) {
  lt::dist::run_threads(3, [](int) {
    auto model = fresh_model();
    int64_t total = 0;
    for (const Tensor& p : model->parameters()) total += p.numel();
    lt::dist::DataParallel dp(*model, {.bucket_bytes = 512, .shard_optimizer = true});
    int64_t shards = 0;
    for (const Tensor& s : dp.parameters()) {
      EXPECT_TRUE(s.requires_grad());
      EXPECT_EQ(s.ndim(), 1);
      shards += s.numel();
    }
    EXPECT_GE(shards * 3, total);  // a third, plus padding under 3 elements per bucket
    EXPECT_LT(shards * 3, total + 3 * static_cast<int64_t>(dp.parameters().size()));
  });
}

// ZeRO-1's shards are made of the same buckets, so that a parameter of bucket_bytes or more
// is reduce-scattered where its gradient lies and all-gathered into itself.
TEST(DataParallel, BucketsFollowReverseParameterOrderUpToTheirSize) {
  lt::dist::run_threads(2, [](int) {
    auto model = fresh_model();
    lt::dist::DataParallel dp(*model, {.bucket_bytes = 1024});
    lt::dist::DataParallel zero1(*model, {.bucket_bytes = 1024, .shard_optimizer = true});
    auto [x, y] = rows(global_batch(0), 0, 4);
    lt::nn::cross_entropy((*model)(x), y).backward();
    dp.all_reduce_gradients();
    zero1.reduce_gradients();
    EXPECT_EQ(zero1.buckets(), dp.buckets());
    const lt::nn::ParamMap params = model->named_parameters();
    std::vector<std::string> names = params.keys(), seen;
    std::map<std::string, int64_t> bytes;
    for (const auto& [name, t] : params) bytes[name] = t.numel() * 4;
    for (const auto& bucket : dp.buckets()) {
      int64_t total = 0;
      for (const std::string& n : bucket) total += bytes[n];
      EXPECT_TRUE(bucket.size() == 1 || total <= 1024) << total;
      seen.insert(seen.end(), bucket.begin(), bucket.end());
    }
    std::reverse(names.begin(), names.end());
    EXPECT_EQ(seen, names);
    EXPECT_GT(dp.buckets().size(), 1u);
  });
}

// A weight tied under two names, a frozen parameter, and weights loaded after DataParallel
// was made (a resumed run): the tied gradient is reduced once (a bucket a parameter), the
// frozen one stays as loaded, and ZeRO-1's shards step from the loaded values; all as one
// process on the whole batch.
TEST(DataParallel, TiedFrozenAndLaterLoadedWeightsTrainAsOneProcess) {
  struct Tied : lt::nn::Module {
    Tensor w1, w2, frozen;
    Tied() {
      w1 = lt::randn({3, 4}).requires_grad_();
      w2 = w1;
      frozen = lt::randn({4});
      register_parameter("w1", w1);
      register_parameter("w2", w2);
      register_parameter("frozen", frozen);
      frozen.requires_grad_(false);
    }
    Tensor forward(const Tensor& x) const {
      return lt::sum(lt::matmul(lt::tanh(lt::matmul(x, lt::transpose(w1, 0, 1))), w2) * frozen);
    }
    std::string name() const override { return "Tied"; }
  };
  auto batch = [](int64_t begin, int64_t end) {
    std::vector<float> v;
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < 4; ++j)
        v.push_back(0.1f * static_cast<float>((5 * i + 3 * j) % 7) - 0.3f);
    return lt::tensor(v, {end - begin, 4});
  };
  auto load = [](Tied& m) {
    lt::NoGradGuard no_grad;
    std::vector<float> w(12), f(4);
    for (int i = 0; i < 12; ++i) w[i] = 0.05f * static_cast<float>(i) - 0.3f;
    for (int i = 0; i < 4; ++i) f[i] = 1.f + 0.25f * static_cast<float>(i);
    m.w1.copy_(lt::tensor(w, {3, 4}));
    m.frozen.copy_(lt::tensor(f, {4}));
  };
  // three AdamW steps on rows [begin, end); dp, where given, reduces and gathers
  auto train = [&](Tied& m, lt::dist::DataParallel* dp, int64_t begin, int64_t end) {
    lt::optim::AdamW opt(dp ? dp->parameters() : m.parameters(), {.lr = 0.1, .weight_decay = 0.1});
    for (int s = 0; s < 3; ++s) {
      m.forward(batch(begin, end)).backward();
      if (dp) dp->reduce_gradients();
      opt.step();
      if (dp) dp->gather_parameters();
      opt.zero_grad();
      lt::sync();
    }
    std::vector<float> out = m.w1.to_vector<float>(), f = m.frozen.to_vector<float>();
    out.insert(out.end(), f.begin(), f.end());
    return out;
  };
  lt::manual_seed(4);
  Tied one;
  load(one);
  const std::vector<float> want = train(one, nullptr, 0, 8);
  for (bool zero1 : {false, true}) {
    std::vector<float> got;
    lt::dist::run_threads(2, [&](int r) {
      Tied m;  // random weights, different on each rank until the broadcast
      lt::dist::DataParallel dp(m,
                                {.bucket_bytes = 16, .average = false, .shard_optimizer = zero1});
      load(m);
      const auto [begin, end] = lt::dist::shard(8);
      std::vector<float> mine = train(m, &dp, begin, end);
      if (r == 0) got = std::move(mine);
    });
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.f, std::abs(want[i]))) << zero1 << " " << i;
  }
}

TEST(DataParallel, RankZerosWeightsReachEveryRank) {
  lt::dist::run_threads(3, [](int r) {
    lt::nn::Linear layer(4, 2);
    {
      lt::NoGradGuard no_grad;
      Tensor w = layer.weight;
      w.copy_(lt::full({2, 4}, static_cast<float>(r + 1)));
    }
    lt::dist::DataParallel dp(layer);
    for (float v : layer.weight.to_vector<float>()) EXPECT_EQ(v, 1.f);
  });
  expect_error(
      [] {
        lt::nn::Linear layer(4, 2);
        lt::dist::DataParallel dp(layer, {.bucket_bytes = 0});
      },
      {"[DataParallel]", "bucket_bytes"});
}

}  // namespace
