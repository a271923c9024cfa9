// The spec's loop tools in C++: scan (the cumulative sum and the dict carry with running
// means), while_loop counting to 13, fori_loop, and scan_layers over a stack of layers.
#include <lazytrace/lazytrace.h>
#include <cstdio>
#include <string>

namespace {

std::string values(const lt::Tensor& t) {
  std::string s = "[";
  for (float v : lt::astype(t, lt::DType::float32).to_vector<float>()) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(v).substr(0, std::to_string(v).find('.') + 3);
  }
  return s + "]";
}

}  // namespace

int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "scan example: %s\n", what);
    ++failures;
  }
}

int main() {
  // def cumsum(accumulated, element): accumulated += element; return accumulated, accumulated
  auto cumsum = [](const lt::Tensor& accumulated, const lt::Tensor& element) {
    lt::Tensor a = accumulated + element;
    return std::pair{a, a};
  };
  auto [final, result] = lt::scan(cumsum, lt::tensor({0.0f}), lt::tensor({1.0f, 2.0f, 3.0f}));
  std::printf("cumsum: final %s, ys %s (shape %s)\n", values(final).c_str(), values(result).c_str(),
              result.shape().str().c_str());
  expect(result.to_vector<float>() == std::vector<float>{1, 3, 6}, "cumsum should be [1, 3, 6]");

  // a dict carry and dict xs
  lt::Tree carry = lt::Tree::dict({{"sum", lt::tensor({0.0f})}, {"count", lt::tensor({0.0f})}});
  lt::Tree xs = lt::Tree::dict({{"values", lt::arange(1, 6, 1, lt::DType::float32)}});
  auto fn = [](const lt::Tree& c, const lt::Tree& x) {
    lt::Tensor new_sum = c["sum"].tensor() + x["values"].tensor();
    lt::Tensor new_count = c["count"].tensor() + 1.0;
    lt::Tensor running_mean = new_sum / new_count;
    return std::pair{lt::Tree::dict({{"sum", new_sum}, {"count", new_count}}),
                     lt::Tree(running_mean)};
  };
  auto [final_carry, means] = lt::scan(fn, carry, xs);
  std::printf("running means: %s, final sum %s\n", values(means.tensor()).c_str(),
              values(final_carry["sum"].tensor()).c_str());
  expect(means.tensor().to_vector<float>() == std::vector<float>{1, 1.5, 2, 2.5, 3},
         "the running means should be [1, 1.5, 2, 2.5, 3]");

  // while_loop: cond_fn(iteri, x) = iteri > 0; body_fn = (iteri - 1, x + 1)
  auto [iteri, res] = lt::while_loop([](const lt::Tensor& i, const lt::Tensor&) { return i > 0; },
                                     [](const lt::Tensor& i, const lt::Tensor& x) {
                                       return std::tuple{i - 1, x + 1};
                                     },
                                     std::tuple{lt::scalar(int64_t{10}), lt::scalar(int64_t{3})});
  std::printf("while_loop: res %lld\n", static_cast<long long>(res.item<int64_t>()));
  expect(res.item<int64_t>() == 13 && iteri.item<int64_t>() == 0, "while_loop should end at 13");

  // fori_loop: sum of i * i for i in [1, 5)
  lt::Tensor squares = lt::fori_loop(
      1, 5, [](const lt::Tensor& i, const lt::Tensor& c) { return c + i * i; },
      lt::scalar(int64_t{0}));
  std::printf("fori_loop: sum of squares %lld\n", static_cast<long long>(squares.item<int64_t>()));
  expect(squares.item<int64_t>() == 1 + 4 + 9 + 16, "fori_loop should sum to 30");

  // scan_layers: 8 identical layers, traced and compiled once
  const int64_t traced = lt::metrics::counter("LoopTrace");
  std::vector<std::shared_ptr<lt::nn::Linear>> layers;
  for (int i = 0; i < 8; ++i) layers.push_back(std::make_shared<lt::nn::Linear>(16, 16));
  lt::Tensor h = lt::nn::scan_layers(layers, lt::randn({4, 16}));
  lt::nn::cross_entropy(h, lt::tensor({1, 2, 3, 4})).backward();
  std::printf(
      "scan_layers: 8 layers, the layer traced %lld time(s) (and its VJP %lld); layer 7 "
      "got a gradient of shape %s\n",
      static_cast<long long>(lt::metrics::counter("LoopTrace") - traced),
      static_cast<long long>(lt::metrics::counter("LoopBackwardTrace")),
      layers[7]->weight.grad().shape().str().c_str());
  expect(lt::metrics::counter("LoopTrace") - traced == 1,
         "scan_layers should trace the layer once");
  expect(layers[7]->weight.grad().shape() == lt::Shape({16, 16}), "layer 7 should get a gradient");

  // a decoder keeping its layers' weights stacked, run as one scan
  lt::nn::DecoderLM model({.vocab = 64,
                           .hidden = 16,
                           .intermediate = 32,
                           .heads = 2,
                           .kv_heads = 1,
                           .layers = 6,
                           .max_seq = 8,
                           .stacked_layers = true});
  model.layers_mode = lt::nn::LayersMode::scan;
  lt::Tensor logits = model(lt::tensor(std::vector<int64_t>{1, 2, 3, 4}, {1, 4}));
  std::printf("stacked decoder: %zu parameter tensors for 6 layers, logits %s\n",
              model.parameters().size(), logits.shape().str().c_str());
  expect(logits.shape() == lt::Shape({1, 4, 64}), "the logits should be [1, 4, 64]");
  return failures == 0 ? 0 : 1;
}
