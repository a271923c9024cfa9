// lazytrace beside LibTorch (eager), in one process, on the same weights and inputs: the
// decoder written with LibTorch's C++ API reads the safetensors file lazytrace saved; the
// logits must agree within 1e-4; then forward and training step (AdamW) times, LibTorch
// eager against lazytrace with its layers as a loop, through assume_pure, and as
// scan_layers. Both use the same number of threads.
// Usage: peers_bench [--json FILE]: FILE gets LibTorch's times per size, which
// bench/peers/python_peers.py --libtorch FILE puts in its table beside the Python peers.
#include <torch/torch.h>

#include <lazytrace/lazytrace.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

// Debian's OpenBLAS serves both: LibTorch's sgemm_ binds to the same libopenblas as
// lazytrace, and it runs on the thread count it was last given. lazytrace sets 1 on first
// use (its pool shares the cores out); LibTorch is timed with 1 and with all threads.
extern "C" void openblas_set_num_threads(int);

namespace {

namespace nn = lt::nn;

struct Size {
  const char* name;
  nn::DecoderConfig config;
  int64_t batch, seq;
  int reps;
};

// ---- the decoder in LibTorch, over the weights of a lazytrace safetensors file

struct TorchDecoder {
  nn::DecoderConfig c;
  std::map<std::string, torch::Tensor> w;

  torch::Tensor p(const std::string& n) const { return w.at(n); }

  torch::Tensor rms(const torch::Tensor& x, const std::string& n) const {
    return x * torch::rsqrt((x * x).mean(-1, true) + c.norm_eps) * p(n);
  }
  torch::Tensor rotary(const torch::Tensor& x) const {
    const int64_t t = x.size(-2), dim = x.size(-1), half = dim / 2;
    auto inv_freq = torch::exp(torch::arange(half, torch::kFloat32) *
                               (-2 * std::log(c.rope_theta) / static_cast<double>(dim)));
    auto angles = torch::arange(t, torch::kFloat32).unsqueeze(1) * inv_freq.unsqueeze(0);
    angles = torch::cat({angles, angles}, -1);
    auto rotated = torch::cat({-x.slice(-1, half, dim), x.slice(-1, 0, half)}, -1);
    return x * torch::cos(angles) + rotated * torch::sin(angles);
  }
  torch::Tensor attention(const torch::Tensor& x, const std::string& l) const {
    const int64_t b = x.size(0), t = x.size(1), hd = c.head_dim(), rep = c.heads / c.kv_heads;
    auto heads = [&](const torch::Tensor& y, int64_t n) {
      return y.view({b, t, n, hd}).permute({0, 2, 1, 3});
    };
    auto q = rotary(heads(torch::linear(x, p(l + "attn.q_proj.weight")), c.heads));
    auto k = rotary(heads(torch::linear(x, p(l + "attn.k_proj.weight")), c.kv_heads));
    auto v = heads(torch::linear(x, p(l + "attn.v_proj.weight")), c.kv_heads);
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    auto causal = torch::ones({t, t}, torch::kBool).tril();
    scores = scores.masked_fill(causal.logical_not(), -INFINITY);
    auto out = torch::matmul(torch::softmax(scores, -1), v)
                   .permute({0, 2, 1, 3})
                   .reshape({b, t, c.hidden});
    return torch::linear(out, p(l + "attn.o_proj.weight"));
  }
  torch::Tensor forward(const torch::Tensor& tokens) const {
    auto h = torch::embedding(p("embed.weight"), tokens);
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string l = "layers." + std::to_string(i) + ".";
      h = h + attention(rms(h, l + "attn_norm.weight"), l);
      auto x = rms(h, l + "mlp_norm.weight");
      h = h + torch::linear(torch::silu(torch::linear(x, p(l + "mlp.gate_proj.weight"))) *
                                torch::linear(x, p(l + "mlp.up_proj.weight")),
                            p(l + "mlp.down_proj.weight"));
    }
    return torch::linear(rms(h, "norm.weight"), p("head.weight"));
  }
};

torch::Tensor to_torch(const lt::Tensor& t) {
  std::vector<float> v = lt::astype(t, lt::DType::float32).to_vector<float>();
  std::vector<int64_t> shape = t.shape().vec();
  return torch::from_blob(v.data(), shape, torch::kFloat32).clone();
}

double median(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The median of `reps` timed runs of f after one to warm up; `times` gets each run's.
double median_ms(int reps, const std::function<void()>& f, std::vector<double>* times = nullptr) {
  f();  // warm up (lazytrace compiles here)
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const int64_t t0 = lt::metrics::now_ns();
    f();
    ms.push_back(static_cast<double>(lt::metrics::now_ns() - t0) / 1e6);
  }
  if (times) *times = ms;
  return median(ms);
}

// lazytrace's model for a mode, with the file's weights (stacked for scan)
std::shared_ptr<nn::DecoderLM> lazytrace_model(const nn::DecoderConfig& base,
                                               const std::string& mode,
                                               const nn::ParamMap& weights) {
  nn::DecoderConfig c = base;
  c.stacked_layers = mode == "scan";
  auto m = std::make_shared<nn::DecoderLM>(c);
  nn::load_per_layer_parameters(*m, weights);
  m->layers_mode = mode == "loop"          ? nn::LayersMode::loop
                   : mode == "assume-pure" ? nn::LayersMode::assume_pure
                                           : nn::LayersMode::scan;
  m->scan_options.is_layer_pure = true;
  lt::sync();
  return m;
}

// LibTorch's times of one size (the faster BLAS setting), for --json.
struct TorchTimes {
  std::string size;
  double forward_ms, step_ms, max_dlogits;
};

bool run_size(const Size& s, int threads, std::vector<TorchTimes>& out) {
  const nn::DecoderConfig& c = s.config;
  const std::string path = std::string("/tmp/lazytrace_peer_") + s.name + ".safetensors";
  {
    lt::manual_seed(1);
    nn::DecoderLM init(c);
    nn::save(init, path);
  }
  const nn::ParamMap weights = nn::load_file(path);
  std::mt19937_64 rng(2);
  std::vector<int64_t> tok(static_cast<size_t>(s.batch * s.seq)), tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>(rng() % 256);
    tgt[i] = static_cast<int64_t>(rng() % 256);
  }
  const lt::Tensor lt_tokens = lt::tensor(tok, {s.batch, s.seq}),
                   lt_targets = lt::tensor(tgt, {s.batch, s.seq});
  const torch::Tensor th_tokens = torch::tensor(tok).view({s.batch, s.seq});
  const torch::Tensor th_targets = torch::tensor(tgt).view({s.batch * s.seq});

  TorchDecoder th{c, {}};
  for (const auto& [name, t] : weights) th.w[name] = to_torch(t).requires_grad_(true);
  torch::Tensor ref;
  {
    torch::NoGradGuard no_grad;
    ref = th.forward(th_tokens);
  }
  std::printf(
      "\n== %s: hidden %lld, intermediate %lld, %lld layers, heads %lld/%lld kv, batch %lld x "
      "seq %lld, %d threads\n",
      s.name, static_cast<long long>(c.hidden), static_cast<long long>(c.intermediate),
      static_cast<long long>(c.layers), static_cast<long long>(c.heads),
      static_cast<long long>(c.kv_heads), static_cast<long long>(s.batch),
      static_cast<long long>(s.seq), threads);

  // LibTorch eager, with OpenBLAS on one thread per product (torch's own threads run the
  // rest) and on all of them: the faster is the reference (on a 2-vCPU VM, OpenBLAS's
  // threads beside torch's OpenMP ones made its step about 3x slower).
  std::vector<torch::Tensor> th_params;
  for (auto& [n, t] : th.w) th_params.push_back(t);
  torch::optim::AdamW th_opt(th_params, torch::optim::AdamWOptions(1e-3));
  auto time_torch = [&](int blas_threads) {
    openblas_set_num_threads(blas_threads);
    const double fwd = median_ms(s.reps, [&] {
      torch::NoGradGuard no_grad;
      th.forward(th_tokens);
    });
    const double step = median_ms(s.reps, [&] {
      auto logits = th.forward(th_tokens);
      auto loss = torch::cross_entropy_loss(logits.view({-1, c.vocab}), th_targets);
      loss.backward();
      th_opt.step();
      th_opt.zero_grad();
    });
    openblas_set_num_threads(1);  // lazytrace's setting
    return std::pair{fwd, step};
  };
  const auto [fwd1, step1] = time_torch(1);
  const auto [fwdn, stepn] = time_torch(threads);
  const double th_fwd = std::min(fwd1, fwdn), th_step = std::min(step1, stepn);
  std::printf("%-22s %12s %12s %12s %12s %14s\n", "", "forward ms", "vs LibTorch", "step ms",
              "vs LibTorch", "max |dlogits|");
  std::printf("%-22s %12.2f %12s %12.2f %12s %14s\n", "LibTorch eager", th_fwd, "1.00x", th_step,
              "1.00x", "(the faster:)");
  const std::string all = "  BLAS on " + std::to_string(threads) + " threads";
  for (const auto& [name, f, st] :
       {std::tuple{std::string("  BLAS on 1 thread"), fwd1, step1}, std::tuple{all, fwdn, stepn}})
    std::printf("%-22s %12.2f %11.2fx %12.2f %11.2fx\n", name.c_str(), f, th_fwd / f, st,
                th_step / st);

  bool ok = true;
  TorchTimes& times_out = out.emplace_back(TorchTimes{s.name, th_fwd, th_step, 0.0});
  for (const char* mode : {"loop", "assume-pure", "scan"}) {
    auto m = lazytrace_model(c, mode, weights);
    lt::Tensor logits;
    {
      lt::NoGradGuard no_grad;
      logits = (*m)(lt_tokens);
    }
    const torch::Tensor diff = (to_torch(logits) - ref).abs().max();
    const double max_diff = diff.item<double>();
    ok = ok && max_diff <= 1e-4;
    times_out.max_dlogits = std::max(times_out.max_dlogits, max_diff);
    const double fwd = median_ms(s.reps, [&] {
      lt::NoGradGuard no_grad;
      lt::Tensor y = (*m)(lt_tokens);
      lt::sync({y});
    });
    lt::optim::AdamW opt(m->parameters(), {.lr = 1e-3});
    // which steps' loops evicted weight slices: those ran where the two threads share no
    // cache (a VM's vCPUs on two core complexes), the others where they share one
    std::vector<char> far;
    std::vector<double> times;
    const double step = median_ms(
        s.reps,
        [&] {
          const int64_t evicted = lt::metrics::counter("LoopSlicesEvicted");
          lt::Tensor loss = nn::cross_entropy((*m)(lt_tokens), lt_targets);
          loss.backward();
          opt.step();
          opt.zero_grad();
          lt::sync();
          far.push_back(lt::metrics::counter("LoopSlicesEvicted") > evicted);
        },
        &times);
    std::printf("%-22s %12.2f %11.2fx %12.2f %11.2fx %14.2e%s\n",
                (std::string("lazytrace ") + mode).c_str(), fwd, th_fwd / fwd, step, th_step / step,
                max_diff, max_diff <= 1e-4 ? "" : "  MISMATCH");
    std::vector<double> apart, shared;  // the timed steps (far[0] is the warm-up's)
    for (size_t i = 0; i < times.size(); ++i) (far[i + 1] ? apart : shared).push_back(times[i]);
    if (!apart.empty()) {
      char others[48] = "";
      if (!shared.empty())
        std::snprintf(others, sizeof others, "; the others %.2f ms", median(shared));
      std::printf("%-22s %zu of %zu steps where the threads share no cache: %.2f ms (%.2fx)%s\n",
                  "", apart.size(), times.size(), median(apart), th_step / median(apart), others);
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (const char* e = std::getenv("LAZYTRACE_NUM_THREADS")) threads = std::atoi(e);
  torch::set_num_threads(threads);
  const Size sizes[] = {
      {"spec-10",
       {.vocab = 256,
        .hidden = 128,
        .intermediate = 1024,
        .heads = 4,
        .kv_heads = 2,
        .layers = 10,
        .max_seq = 8},
       2,
       8,
       20},
      {"spec-100",
       {.vocab = 256,
        .hidden = 128,
        .intermediate = 1024,
        .heads = 4,
        .kv_heads = 2,
        .layers = 100,
        .max_seq = 8},
       2,
       8,
       10},
      {"compute",
       {.vocab = 256,
        .hidden = 512,
        .intermediate = 2048,
        .heads = 8,
        .kv_heads = 4,
        .layers = 4,
        .max_seq = 256},
       2,
       256,
       5},
  };
  std::printf(
      "lazytrace vs LibTorch %s eager; times are medians; ratios are LibTorch time / "
      "lazytrace time (> 1: lazytrace faster)\n",
      TORCH_VERSION);
  bool ok = true;
  std::vector<TorchTimes> times;
  for (const Size& s : sizes) ok = run_size(s, threads, times) && ok;
  std::printf("\nlogits %s within 1e-4 of LibTorch's\n", ok ? "agree" : "DO NOT agree");
  if (json != nullptr) {
    FILE* f = std::fopen(json, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "peers_bench: cannot write %s\n", json);
      return 1;
    }
    std::fprintf(f, "{\"libtorch\": \"%s\", \"threads\": %d, \"sizes\": {", TORCH_VERSION, threads);
    for (size_t i = 0; i < times.size(); ++i)
      std::fprintf(f, "%s\"%s\": {\"forward_ms\": %.6g, \"step_ms\": %.6g, \"max_dlogits\": %.3g}",
                   i ? ", " : "", times[i].size.c_str(), times[i].forward_ms, times[i].step_ms,
                   times[i].max_dlogits);
    std::fprintf(f, "}}\n");
    std::fclose(f);
  }
  return ok ? 0 : 1;
}
