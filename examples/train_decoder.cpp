// Training a small decoder-only transformer on the bytes of the GPL-3 text: each step
// (forward, backward, AdamW update) is recorded into one graph, compiled at the first step
// and replayed from the compile cache afterwards. Saves the weights as safetensors.
#include <lazytrace/lazytrace.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

int main() {
  std::ifstream file("/usr/share/common-licenses/GPL-3", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.size() < 1000) {
    std::printf("no GPL-3 text at /usr/share/common-licenses/GPL-3\n");
    return 1;
  }
  lt::manual_seed(0);
  auto model = std::make_shared<lt::nn::DecoderLM>(lt::nn::DecoderConfig{.vocab = 256,
                                                                         .hidden = 128,
                                                                         .intermediate = 512,
                                                                         .heads = 4,
                                                                         .kv_heads = 2,
                                                                         .layers = 4,
                                                                         .max_seq = 64});
  lt::optim::AdamW opt(model->parameters(), {.lr = 3e-3});
  std::printf("DecoderLM: %zu parameter tensors\n", model->parameters().size());

  const int64_t batch = 8, seq = 64, steps = 60;
  std::mt19937_64 rng(1);
  lt::metrics::reset();
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> tokens(static_cast<size_t>(batch * (seq + 1)));
    for (int64_t b = 0; b < batch; ++b) {
      const size_t start = rng() % (text.size() - seq - 1);
      for (int64_t t = 0; t <= seq; ++t)
        tokens[b * (seq + 1) + t] = static_cast<unsigned char>(text[start + t]);
    }
    lt::Tensor data = lt::tensor(tokens, {batch, seq + 1});
    lt::Tensor loss =
        lt::nn::cross_entropy((*model)(lt::slice(data, 1, 0, seq)), lt::slice(data, 1, 1, seq + 1));
    loss.backward();
    opt.step();
    opt.zero_grad();
    lt::sync();  // the whole step: one graph
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 10 == 0 || step == steps - 1)
      std::printf("step %3d  loss %.3f  (compiles so far: %lld)\n", step, last,
                  static_cast<long long>(lt::metrics::counter("CompileCount")));
  }
  const double ms = [](const char* t) { return lt::metrics::timer_ns(t) / 1e6; }("ExecuteTime");
  std::printf("loss %.3f -> %.3f (uniform guess: %.3f); %lld compile(s), %lld cache hits\n", first,
              last, std::log(256.0), static_cast<long long>(lt::metrics::counter("CompileCount")),
              static_cast<long long>(lt::metrics::counter("CacheHit")));
  std::printf("time: tracing %.1f ms, compiling %.1f ms, executing %.1f ms over %lld steps\n",
              lt::metrics::timer_ns("TraceTime") / 1e6, lt::metrics::timer_ns("CompileTime") / 1e6,
              ms, static_cast<long long>(steps));

  const auto path = std::filesystem::temp_directory_path() / "lazytrace_decoder.safetensors";
  lt::nn::save(*model, path.string());
  std::printf("weights saved to %s (%lld bytes)\n", path.string().c_str(),
              static_cast<long long>(std::filesystem::file_size(path)));
  return first - last > 1.0 && lt::metrics::counter("CompileCount") == 1 ? 0 : 1;
}
