// lazytrace generate: sample text from trained weights. The whole sampling loop is one
// while_loop run by the backend: one compile, one execution, no host round trip per token.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <tuple>

#include "commands.h"
#include "run.h"

namespace cli {

namespace {

using lt::Tensor;

// Samples up to `max_tokens` tokens after `prompt` into a [1, seq] buffer, in one loop.
// Returns (buffer, end position, whether it stopped at logits that were not numbers).
std::tuple<Tensor, Tensor, Tensor> sample(const lt::nn::DecoderLM& model, const std::string& prompt,
                                          int64_t max_tokens, double temperature,
                                          bool stop_at_newline) {
  const int64_t seq = model.config.max_seq, start = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> init(static_cast<size_t>(seq), 0);
  for (size_t i = 0; i < prompt.size(); ++i) init[i] = static_cast<unsigned char>(prompt[i]);
  lt::NoGradGuard no_grad;
  const Tensor positions = lt::arange(static_cast<double>(seq));
  const Tensor vocab_ids = lt::arange(256, lt::DType::float32);
  const Tensor end = lt::scalar(start + max_tokens);
  // tokens [1, seq], position, done (a newline), NaN (logits that are not numbers)
  using Carry = std::tuple<Tensor, Tensor, Tensor, Tensor>;
  auto cond = [&](const Tensor&, const Tensor& pos, const Tensor& done, const Tensor& nan) {
    const Tensor go =
        1 - lt::maximum(lt::astype(done, lt::DType::int64), lt::astype(nan, lt::DType::int64));
    return lt::astype(pos < end, lt::DType::int64) * go > 0;
  };
  auto body = [&](const Tensor& tokens, const Tensor& pos, const Tensor& done, const Tensor&) {
    // the logits at the last filled position (a causal model ignores the zeros after it)
    Tensor logits =
        lt::reshape(lt::index_select(model(tokens), 1, lt::reshape(pos - 1, {1})), {256});
    Tensor z = logits;
    if (temperature > 0) {  // Gumbel-max: argmax of logits / T + Gumbel noise samples
      Tensor u = lt::rand({256}) * (1 - 2e-7) + 1e-7;
      z = logits / temperature - lt::log(-lt::log(u));
    }
    // the likeliest byte; -1 where no logit equals their max (NaN)
    Tensor next =
        lt::astype(lt::amax(lt::where(z == lt::amax(z), vocab_ids, -1.0)), lt::DType::int64);
    Tensor nan = next < int64_t{0};
    Tensor filled = lt::where(positions == pos, lt::where(nan, int64_t{0}, next), tokens);
    Tensor stop = stop_at_newline ? next == int64_t{10} : done;
    return Carry{filled, pos + 1, stop, nan};
  };
  Carry out = lt::while_loop(
      cond, body,
      Carry{lt::tensor(init, {1, seq}), lt::scalar(start), lt::scalar(false), lt::scalar(false)});
  return {std::get<0>(out), std::get<1>(out), std::get<3>(out)};
}

}  // namespace

int generate(int argc, char** argv) {
  Flags f("generate",
          "Loads weights saved by train or compare and samples text after a prompt. The\n"
          "sampling loop runs in the backend as one while_loop.");
  f.add("weights", "lazytrace-model.safetensors", "weights to load");
  f.add("prompt", "The ", "text to continue");
  f.add("max-tokens", "64",
        "most tokens to sample (without the flag: at most what the context leaves)");
  f.add("temperature", "0.8", "sampling temperature (0: always the likeliest byte)");
  f.add("seed", "0", "random seed");
  f.add_switch("stop-at-newline", "stop after sampling a newline");
  if (!f.parse(argc, argv)) return 0;
  const std::string path = f.str("weights"), prompt = f.str("prompt");
  int64_t max_tokens = f.integer("max-tokens", 1);
  const double temperature = f.number("temperature");
  if (!(std::isfinite(temperature) && temperature >= 0))
    throw UsageError(cat("--temperature must be a finite number >= 0, got ", f.str("temperature")));
  if (prompt.empty()) throw UsageError("--prompt must not be empty");
  lt::nn::DecoderConfig c = config_from_metadata(lt::nn::load_metadata(path), path);
  const int64_t room = c.max_seq - static_cast<int64_t>(prompt.size());
  if (!f.given("max-tokens") && room >= 1) max_tokens = std::min(max_tokens, room);
  if (static_cast<int64_t>(prompt.size()) + max_tokens > c.max_seq)
    throw UsageError(cat("the prompt (", std::to_string(prompt.size()), " bytes) and --max-tokens ",
                         std::to_string(max_tokens), " exceed the model's context of ",
                         std::to_string(c.max_seq), " tokens; shorten one"));
  lt::manual_seed(static_cast<uint64_t>(f.integer("seed", 0)));
  lt::nn::DecoderLM model(c);
  lt::nn::load_per_layer_parameters(model, weights_in(lt::nn::load_file(path)));
  model.eval();
  const int64_t compiles = lt::metrics::counter("CompileCount");
  const int64_t runs = lt::metrics::counter("ExecuteCount");
  auto [tokens, end, nan] = sample(model, prompt, max_tokens, temperature, f.on("stop-at-newline"));
  lt::sync({tokens, end, nan});
  const std::vector<int64_t> t = tokens.to_vector<int64_t>();
  const int64_t stop = end.item<int64_t>();
  if (nan.item<bool>())
    throw std::runtime_error(cat(
        "the model's logits at position ", std::to_string(stop - 1), " are not numbers (NaN): '",
        path, "' holds weights that are not finite (a training run that diverged?)"));
  std::string out(prompt);
  for (int64_t i = static_cast<int64_t>(prompt.size()); i < stop; ++i)
    out.push_back(static_cast<char>(t[static_cast<size_t>(i)]));
  std::printf("%s\n", out.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "[generate] %lld tokens in one loop: %lld compile(s), %lld execution(s)\n",
               static_cast<long long>(stop - static_cast<int64_t>(prompt.size())),
               static_cast<long long>(lt::metrics::counter("CompileCount") - compiles),
               static_cast<long long>(lt::metrics::counter("ExecuteCount") - runs));
  return 0;
}

}  // namespace cli
