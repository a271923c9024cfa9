// The spec's assume_pure examples in C++: a plain function traced once for 1000 calls, and
// a module made pure with functional_call; then compile() running a step as one graph.
#include <lazytrace/lazytrace.h>
#include <cstdio>

struct MyModule : lt::nn::Module {
  std::shared_ptr<lt::nn::Linear> linear;
  MyModule() { linear = register_module("linear", std::make_shared<lt::nn::Linear>(10, 10)); }
  lt::Tensor forward(const lt::Tensor& x) const { return (*linear)(x); }
  std::string name() const override { return "MyModule"; }
};

int main() {
  // @assume_pure def do_math(a, b, c=42): return a @ b + c
  auto do_math = lt::assume_pure(
      [](const lt::Tensor& a, const lt::Tensor& b, int c) { return lt::matmul(a, b) + c; });
  lt::Tensor x = lt::randn({4, 8}), y = lt::randn({8, 3});
  lt::Tensor result;
  for (int i = 0; i < 1000; ++i) result = do_math(x, y, 42);
  std::printf("do_math: 1000 calls, traced %lld time(s); result[0][0] = %.4f\n",
              static_cast<long long>(lt::metrics::counter("AssumePureTrace")),
              lt::slice(lt::slice(result, 0, 0, 1), 1, 0, 1).item<float>());

  // pure_forward = lambda params, buffers, x: functional_call(module, (params, buffers), (x,))
  auto module = std::make_shared<MyModule>();
  auto cached_forward =
      lt::assume_pure([module](const lt::nn::ParamMap& params, const lt::nn::ParamMap& buffers,
                               const lt::Tensor& input) {
        return lt::nn::functional_call(*module, params, buffers, input);
      });
  lt::nn::ParamMap params = module->named_parameters();
  lt::nn::ParamMap buffers = module->named_buffers();
  lt::Tensor out;
  for (int i = 0; i < 1000; ++i) out = cached_forward(params, buffers, lt::randn({5, 10}));
  lt::sync();
  std::printf("module: 1000 calls, traced %lld time(s) in all\n",
              static_cast<long long>(lt::metrics::counter("AssumePureTrace")));

  // torch_xla.compile: the whole function is one graph per call, checked not to vary
  auto step = lt::compile(
      [](const lt::Tensor& a, const lt::Tensor& b) { return lt::softmax(lt::matmul(a, b), -1); },
      {.full_graph = true, .name = "step", .max_different_graphs = 1});
  for (int i = 0; i < 10; ++i) out = step(lt::randn({4, 8}), y);
  std::printf("compile: 10 calls, %lld graph run(s) named 'step', %lld compile(s)\n",
              static_cast<long long>(lt::metrics::counter("ExecuteCount[step]")),
              static_cast<long long>(lt::metrics::counter("CompileCount[step]")));
  try {
    step(lt::randn({5, 8}), y);  // a new shape: a second graph, over the limit
  } catch (const lt::Error& e) {
    std::printf("a new shape: %s\n", e.what());
  }
  return lt::metrics::counter("AssumePureTrace") == 2 ? 0 : 1;
}
