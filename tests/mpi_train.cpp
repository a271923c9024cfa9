// Run by ctest under mpirun (tests/CMakeLists.txt), each process a rank of MPI_COMM_WORLD:
//   mpi_train train     collectives against loops over the ranks' values, then 20 steps of
//                       data-parallel training of the tiny decoder against the same steps in
//                       one process on the whole batch (losses within 1e-5)
//                       (also with the layers as one scan over stacked weights, whose
//                       gradients are all-reduced a layer at a time inside the backward loop
//                       where the communicator can overlap, and with ZeRO-1:
//                       reduce-scattered, AdamW on shards, all-gathered)
//   mpi_train mismatch  the ranks issue different collectives: every rank ends in the clear
//                       lt::Error (ctest's timeout catches a hang)
//   mpi_train mismatch-overlap  rank 0 compiles without the overlap_collectives pass (its
//                       exchanges are split differently; run with LAZYTRACE_MPI_OVERLAP=on,
//                       which keeps the pass at work on rank 1): the same clear error
//   mpi_train init-fails TEXT  lt::dist::init() raises an lt::Error saying TEXT (a setting
//                       it does not know); checked here, so that the run ends normally
// Exit status 0 on success; every rank checks and prints its own failures.
#include <lazytrace/lazytrace.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "runtime/communicator.h"
#include "tiny_decoder.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED %s\n", lt::dist::rank(), what.c_str());
}

void collectives() {
  const int n = lt::dist::world_size(), r = lt::dist::rank();
  lt::Tensor x = lt::tensor(std::vector<double>{1.0 + r, 0.5 * r, -2.0 * r}, {3});
  const double s = n * (n - 1) / 2.0;
  check(lt::all_reduce(x).to_vector<double>() == std::vector<double>{n + s, 0.5 * s, -2.0 * s},
        "all_reduce sum");
  check(lt::all_reduce(x, "max").to_vector<double>() ==
            std::vector<double>{double(n), 0.5 * (n - 1), 0.0},
        "all_reduce max");
  std::vector<int64_t> blocks;
  for (int q = 0; q < n; ++q) blocks.push_back(10 * q + r);
  std::vector<int64_t> want_rs = {10 * r * n + static_cast<int64_t>(s)};
  check(lt::reduce_scatter(lt::tensor(blocks, {n})).to_vector<int64_t>() == want_rs,
        "reduce_scatter");
  // float32, long enough to run in several chunks where LAZYTRACE_MPI_CHUNK_MB is small
  const int64_t m = 3001;  // (not 3000: then every block would hold the same values)
  std::vector<float> mine(static_cast<size_t>(n * m)), want(static_cast<size_t>(m), 0.0f);
  for (int64_t i = 0; i < n * m; ++i) mine[static_cast<size_t>(i)] = float((i * 7 + r) % 1000);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < m; ++i)
      want[static_cast<size_t>(i)] += float(((r * m + i) * 7 + q) % 1000);
  check(lt::reduce_scatter(lt::tensor(mine, {n * m})).to_vector<float>() == want,
        "reduce_scatter of " + std::to_string(n * m) + " floats");
  // scaled as they are reduced: a mean, and a scale of 0.25
  std::vector<float> want_mean(static_cast<size_t>(n * m), 0.0f), want_quarter = want;
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < n * m; ++i)
      want_mean[static_cast<size_t>(i)] += float((i * 7 + q) % 1000);
  for (float& w : want_mean) w *= float(1.0 / n);
  for (float& w : want_quarter) w *= 0.25f;
  check(lt::all_reduce(lt::tensor(mine, {n * m}), "mean").to_vector<float>() == want_mean,
        "all_reduce mean");
  check(
      lt::reduce_scatter(lt::tensor(mine, {n * m}), "sum", 0.25).to_vector<float>() == want_quarter,
      "reduce_scatter, scale 0.25");
  std::vector<float> highest(static_cast<size_t>(m), 0.0f);  // every value is >= 0
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < m; ++i) {
      float& h = highest[static_cast<size_t>(i)];
      h = std::max(h, float(((r * m + i) * 7 + q) % 1000));
    }
  check(lt::reduce_scatter(lt::tensor(mine, {n * m}), "max").to_vector<float>() == highest,
        "reduce_scatter max");
  std::vector<int64_t> gathered;
  for (int q = 0; q < n; ++q) gathered.push_back(q * q);
  check(
      lt::all_gather(lt::tensor(std::vector<int64_t>{int64_t{r} * r}, {1})).to_vector<int64_t>() ==
          gathered,
      "all_gather");
  // every rank's m floats, rank after rank; and as bfloat16 (integers below 256: exact)
  std::vector<float> part(static_cast<size_t>(m)), all_parts;
  for (int64_t i = 0; i < m; ++i) part[static_cast<size_t>(i)] = float(r * 50 + i % 50);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < m; ++i) all_parts.push_back(float(q * 50 + i % 50));
  check(lt::all_gather(lt::tensor(part, {m})).to_vector<float>() == all_parts,
        "all_gather of " + std::to_string(m) + " floats");
  check(lt::astype(lt::all_gather(lt::astype(lt::tensor(part, {m}), lt::bfloat16)), lt::float32)
                .to_vector<float>() == all_parts,
        "all_gather of bfloat16");
  // 16-bit floats travel as they are and are summed in float32, rounded once: 256 + 1 + 1
  // is 258 over 3 ranks (rounded at each add it would stay 256); the reference is the sum in
  // float32, cast
  std::vector<float> halves(static_cast<size_t>(n * m)), sums(static_cast<size_t>(n * m), 0.0f);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < n * m; ++i) {
      const float v = (q == 0 ? 256.0f : 1.0f) + float(i % 5) * (q == 0 ? 2.0f : 0.25f);
      if (q == r) halves[static_cast<size_t>(i)] = v;
      sums[static_cast<size_t>(i)] += v;
    }
  const auto round_trip = [](const lt::Tensor& t, lt::DType d) {
    return lt::astype(lt::astype(t, d), lt::float32).to_vector<float>();
  };
  for (lt::DType d : {lt::bfloat16, lt::float16}) {
    const std::string name = lt::dtype_name(d);
    const lt::Tensor x = lt::astype(lt::tensor(halves, {n * m}), d);
    check(lt::astype(lt::all_reduce(x), lt::float32).to_vector<float>() ==
              round_trip(lt::tensor(sums, {n * m}), d),
          "all_reduce of " + name);
    const std::vector<float> mine_sums(sums.begin() + r * m, sums.begin() + (r + 1) * m);
    check(lt::astype(lt::reduce_scatter(x), lt::float32).to_vector<float>() ==
              round_trip(lt::tensor(mine_sums, {m}), d),
          "reduce_scatter of " + name);
    // the mean: the float32 sum times 1/n, rounded once
    std::vector<float> means(mine_sums);
    for (float& v : means) v *= static_cast<float>(1.0 / n);
    check(lt::astype(lt::reduce_scatter(x, "mean"), lt::float32).to_vector<float>() ==
              round_trip(lt::tensor(means, {m}), d),
          "reduce_scatter mean of " + name);
  }
  check(lt::broadcast(lt::full({2}, float(r + 3)), n - 1).to_vector<float>() ==
            std::vector<float>{float(n + 2), float(n + 2)},
        "broadcast");
}

// Dropout of this rank's examples masks them as one process masking the whole batch does.
void dropout() {
  const lt::Tensor x = lt::reshape(lt::arange(1, 25, 1, lt::DType::float32), {6, 4});
  lt::nn::Dropout drop(0.5);
  lt::manual_seed(9);
  lt::set_batch_rows({});
  const std::vector<float> whole = drop(x).to_vector<float>();
  const auto [begin, end] = lt::dist::shard(6);
  lt::manual_seed(9);
  check(drop(lt::slice(x, 0, begin, end)).to_vector<float>() ==
            std::vector<float>(whole.begin() + begin * 4, whole.begin() + end * 4),
        "dropout by global example index");
}

std::pair<lt::Tensor, lt::Tensor> batch_rows(int step, int64_t begin, int64_t end) {
  std::vector<int64_t> x, y;
  for (int64_t b = begin; b < end; ++b)
    for (int64_t t = 0; t < 3; ++t) {
      x.push_back((5 * b + 3 * t + 7 * step) % 16);
      y.push_back((5 * b + 3 * t + 7 * step + 1 + b % 3) % 16);
    }
  return {lt::tensor(x, {end - begin, 3}), lt::tensor(y, {end - begin, 3})};
}

std::vector<float> train(bool parallel, bool stacked = false, bool zero1 = false) {
  lt::manual_seed(3);
  lt::nn::DecoderConfig config = tiny_decoder_config();
  config.stacked_layers = stacked;
  auto model = std::make_shared<lt::nn::DecoderLM>(config);
  if (stacked) model->layers_mode = lt::nn::LayersMode::scan;
  std::optional<lt::dist::DataParallel> dp;
  // stacked: a bucket per gradient, so that the layers' all-reduces start inside the loop
  if (parallel)
    dp.emplace(*model, lt::dist::DataParallelOptions{.bucket_bytes = stacked ? 64 : 4 << 20,
                                                     .shard_optimizer = zero1});
  lt::optim::AdamW opt(dp ? dp->parameters() : model->parameters(), {.lr = 0.05});
  auto step = lt::compile([&](const lt::Tensor& x, const lt::Tensor& y) {
    lt::Tensor loss = lt::nn::cross_entropy((*model)(x), y);
    loss.backward();
    if (dp) dp->all_reduce_gradients();
    opt.step();
    if (dp) dp->gather_parameters();
    opt.zero_grad();
    return dp ? dp->average(loss) : loss;
  });
  std::vector<float> losses;
  for (int s = 0; s < 20; ++s) {
    auto [begin, end] = parallel ? lt::dist::shard(6) : std::pair<int64_t, int64_t>{0, 6};
    auto [x, y] = batch_rows(s, begin, end);
    losses.push_back(step(x, y).item<float>());
  }
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "train";
  if (mode == "init-fails") {
    const std::string says = argc > 2 ? argv[2] : "";
    try {
      lt::dist::init();
      check(false, "dist::init raised no error");
    } catch (const lt::Error& e) {
      check(!says.empty() && std::strstr(e.what(), says.c_str()) != nullptr,
            std::string("the error says '") + says + "': " + e.what());
    }
    return failures == 0 ? 0 : 1;
  }
  try {
    lt::dist::init();
    check(lt::dist::launched_by_mpi(), "run under mpirun");
    if (mode == "mismatch-overlap") {
      if (!lt::runtime::current_communicator().can_overlap()) {  // (an MPI without threads)
        if (lt::dist::rank() == 0) std::printf("skipped: collectives cannot overlap here\n");
        return 0;
      }
      lt::dist::set_timeout(30);
      if (lt::dist::rank() == 0) lt::debug::set_disabled_passes({"overlap_collectives"});
      try {
        train(true, true);
        check(false, "ranks compiled with and without overlap_collectives raised no error");
      } catch (const lt::Error& e) {
        check(std::strstr(e.what(), "issue different collectives") != nullptr,
              std::string("the error names the mismatch: ") + e.what());
      }
    } else if (mode == "mismatch") {
      lt::dist::set_timeout(30);
      try {
        lt::all_reduce(lt::ones({lt::dist::rank() == 0 ? 4 : 5})).to_vector<float>();
        check(false, "different collectives raised no error");
      } catch (const lt::Error& e) {
        check(std::strstr(e.what(), "issue different collectives") != nullptr,
              std::string("the error names the mismatch: ") + e.what());
      }
    } else {
      collectives();
      dropout();
      for (auto [stacked, zero1] : {std::pair{false, false}, {true, false}, {true, true}}) {
        const int64_t in_loops = lt::metrics::counter("CollectivesInLoops");
        const std::vector<float> dp = train(true, stacked, zero1);
        // (ZeRO-1 reduce-scatters a stacked gradient where the loop writes it where its size
        // is a multiple of the ranks: at 2; at 3 it is padded; one rank exchanges nothing)
        // (where collectives do not overlap the computation, LAZYTRACE_MPI_OVERLAP or the
        // ranks' threads filling the cores, they stay where the graph has them)
        const int ranks = lt::dist::world_size();
        const bool overlap = lt::runtime::current_communicator().can_overlap();
        if (stacked && ranks > 1 && (!zero1 || ranks == 2))
          check((lt::metrics::counter("CollectivesInLoops") > in_loops) == overlap,
                overlap ? "collectives in the loop" : "no collectives in the loop");
        std::vector<float> one;
        {
          lt::runtime::SingleProcess single;  // this rank alone, on the whole batch
          lt::runtime::CommunicatorScope scope(&single);
          one = train(false, stacked);
        }
        const std::string what =
            std::string(stacked ? "stacked, " : "") + (zero1 ? "ZeRO-1, " : "") + "step ";
        for (size_t i = 0; i < dp.size(); ++i)
          check(std::abs(dp[i] - one[i]) <= 1e-5f * std::abs(one[i]),
                what + std::to_string(i) + " loss " + std::to_string(dp[i]) + " vs one process " +
                    std::to_string(one[i]));
        check(dp.back() < dp.front(), "the loss falls");
        if (lt::dist::rank() == 0)
          std::printf("%d ranks%s%s: losses %.6f -> %.6f (one process %.6f -> %.6f)\n",
                      lt::dist::world_size(), stacked ? ", stacked layers" : "",
                      zero1 ? ", ZeRO-1" : "", dp.front(), dp.back(), one.front(), one.back());
      }
    }
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  return failures == 0 ? 0 : 1;
}
