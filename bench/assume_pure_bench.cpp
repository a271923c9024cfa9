// The spec's assume_pure benchmark: recording the forward pass of a decoder-only model
// (hidden 128, intermediate 1024, vocab 256, batch 2, sequence 8) at 10, 100 and 1000
// layers, three ways, in one run:
//
//   BM_TracePlain/L          every op recorded, as plain lazy tracing does
//   BM_TracePerLayer/L       assume_pure on the layer: one call node per layer (all layers
//                            share one trace: same structure, their own weights as a ParamMap)
//   BM_TraceWholeModel/L     assume_pure on the whole model (weights closed over)
//   BM_CallWholeModel/H/P/G  one call of it at 100 layers, the weights closed over or passed
//                            as a ParamMap or a vector, with and without pack_arguments
//
// (under NoGradGuard: tracing the forward pass, no gradient tape), and the compile time of
// the plain graph (also under NoGradGuard: calls that are not differentiated are compiled
// once per body and shared) against the per-layer one (BM_Compile*/L: a sync
// of the forward pass with the compile cache cleared; CompileTime per iteration).
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include <lazytrace/lazytrace.h>

#include "backends/cpu/program.h"
#include "compiler/compile_cache.h"

namespace {

using lt::Tensor;
namespace nn = lt::nn;

struct Model {
  std::shared_ptr<nn::DecoderLM> lm;
  std::vector<nn::ParamMap> layer_params;
  Tensor tokens;
  std::function<Tensor(const nn::ParamMap&, const Tensor&)> layer_fn;
  std::function<Tensor(const Tensor&)> whole_fn;

  explicit Model(int64_t layers, bool materialize) {
    lt::manual_seed(0);
    lm = std::make_shared<nn::DecoderLM>(nn::DecoderConfig{.vocab = 256,
                                                           .hidden = 128,
                                                           .intermediate = 1024,
                                                           .heads = 4,
                                                           .kv_heads = 4,
                                                           .layers = layers,
                                                           .max_seq = 8});
    for (const auto& layer : *lm->layers) layer_params.push_back(layer->named_parameters());
    std::vector<int64_t> t(16);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>(i * 37 % 256);
    tokens = lt::tensor(t, {2, 8});
    if (materialize) lt::sync();
    auto layer0 = lm->layers->at<nn::DecoderLayer>(0);
    layer_fn = lt::assume_pure([layer0](const nn::ParamMap& p, const Tensor& h) {
      return nn::functional_call(*layer0, p, {}, h);
    });
    auto model = lm;
    whole_fn = lt::assume_pure([model](const Tensor& tok) { return model->forward(tok); });
  }

  Tensor plain() const { return lm->forward(tokens); }
  Tensor per_layer() const {
    Tensor h = (*lm->embed)(tokens);
    for (const nn::ParamMap& p : layer_params) h = layer_fn(p, h);
    return (*lm->head)((*lm->norm)(h));
  }
  Tensor whole() const { return whole_fn(tokens); }
};

Model& model(int64_t layers, bool materialize = false) {
  static std::map<std::pair<int64_t, bool>, std::unique_ptr<Model>> models;
  auto& m = models[{layers, materialize}];
  if (!m) m = std::make_unique<Model>(layers, materialize);
  return *m;
}

template <typename F>
void trace_bench(benchmark::State& state, F record, bool tape = false) {
  // the spec traces the forward pass with no tape; the *Autograd rows record it too
  const bool was = lt::is_grad_enabled();
  lt::set_grad_enabled(tape);
  Model& m = model(state.range(0));
  Tensor warm = record(m);  // the first call of an assume_pure function traces it
  warm = Tensor();
  const int64_t nodes0 = lt::metrics::counter("TraceCount");
  for (auto _ : state) {
    Tensor logits = record(m);
    benchmark::DoNotOptimize(logits);
    state.PauseTiming();
    logits = Tensor();  // dropping the recorded graph is not tracing
    state.ResumeTiming();
  }
  state.counters["nodes_per_forward"] =
      static_cast<double>(lt::metrics::counter("TraceCount") - nodes0) / state.iterations();
  lt::set_grad_enabled(was);
}

void BM_TracePlain(benchmark::State& state) {
  trace_bench(state, [](Model& m) { return m.plain(); });
}
void BM_TracePerLayer(benchmark::State& state) {
  trace_bench(state, [](Model& m) { return m.per_layer(); });
}
void BM_TraceWholeModel(benchmark::State& state) {
  trace_bench(state, [](Model& m) { return m.whole(); });
}
void BM_TracePlainAutograd(benchmark::State& state) {
  trace_bench(
      state, [](Model& m) { return m.plain(); }, true);
}
void BM_TraceWholeModelAutograd(benchmark::State& state) {
  trace_bench(
      state, [](Model& m) { return m.whole(); }, true);
}
BENCHMARK(BM_TracePlain)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TracePerLayer)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TraceWholeModel)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TracePlainAutograd)->Arg(100)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TraceWholeModelAutograd)->Arg(100)->Unit(benchmark::kMicrosecond);

// One call of assume_pure on the whole 100-layer model (903 weights), the weights closed
// over (0), passed as a ParamMap (1) or as a std::vector (2), traced with the pass
// pack_arguments on (1) or off (0; it packs only arguments), with autograd on (1) or off (0).
void BM_CallWholeModel(benchmark::State& state) {
  const int64_t holder = state.range(0);
  const bool pack = state.range(1) != 0, grad = state.range(2) != 0;
  Model& m = model(100, /*materialize=*/true);
  std::vector<std::string> was = lt::debug::set_disabled_passes(
      pack ? std::vector<std::string>{} : std::vector<std::string>{"pack_arguments"});
  nn::ParamMap map = m.lm->named_parameters();
  std::vector<Tensor> vec;
  std::vector<std::string> names;
  for (const auto& [name, t] : map) {
    names.push_back(name);
    vec.push_back(t);
  }
  auto lm = m.lm;
  auto closed = lt::assume_pure([lm](const Tensor& tok) { return lm->forward(tok); });
  auto by_map = lt::assume_pure([lm](const nn::ParamMap& p, const Tensor& tok) {
    return nn::functional_call(*lm, p, {}, tok);
  });
  auto by_vec = lt::assume_pure([lm, names](const std::vector<Tensor>& v, const Tensor& tok) {
    nn::ParamMap p;
    for (size_t i = 0; i < v.size(); ++i) p.insert(names[i], v[i]);
    return nn::functional_call(*lm, p, {}, tok);
  });
  auto call = [&] {
    return holder == 0   ? closed(m.tokens)
           : holder == 1 ? by_map(map, m.tokens)
                         : by_vec(vec, m.tokens);
  };
  const bool grad_was = lt::is_grad_enabled();
  lt::set_grad_enabled(grad);
  call();  // traced here, with the pass setting above
  lt::debug::set_disabled_passes(was);
  for (auto _ : state) {
    Tensor logits = call();
    benchmark::DoNotOptimize(logits);
  }
  lt::set_grad_enabled(grad_was);
  state.SetLabel(std::string(holder == 0   ? "closed over"
                             : holder == 1 ? "ParamMap"
                                           : "vector") +
                 (pack ? "" : ", pack_arguments off") + (grad ? ", autograd" : ", no_grad"));
}
BENCHMARK(BM_CallWholeModel)
    ->Args({0, 1, 0})
    ->Args({1, 1, 0})
    ->Args({1, 0, 0})
    ->Args({2, 1, 0})
    ->Args({2, 0, 0})
    ->Args({0, 1, 1})
    ->Args({1, 1, 1})
    ->Args({1, 0, 1})
    ->Args({2, 1, 1})
    ->Args({2, 0, 1})
    ->Unit(benchmark::kMicrosecond);

template <typename F>
void compile_bench(benchmark::State& state, F record) {
  lt::NoGradGuard inference;  // differentiated calls are inlined (their VJP merges with them)
  Model& m = model(state.range(0), /*materialize=*/true);
  int64_t compile_ns = 0;
  for (auto _ : state) {
    state.PauseTiming();
    lazytrace::compiler::CompileCache::global().clear();
    lazytrace::cpu::clear_body_programs();  // a compile from scratch
    Tensor logits = record(m);
    const int64_t c0 = lt::metrics::timer_ns("CompileTime");
    state.ResumeTiming();
    lt::sync({logits});
    state.PauseTiming();
    compile_ns += lt::metrics::timer_ns("CompileTime") - c0;
    state.ResumeTiming();
  }
  state.counters["compile_ms"] = compile_ns / 1e6 / state.iterations();
}

void BM_CompilePlain(benchmark::State& state) {
  compile_bench(state, [](Model& m) { return m.plain(); });
}
void BM_CompilePerLayer(benchmark::State& state) {
  compile_bench(state, [](Model& m) { return m.per_layer(); });
}
BENCHMARK(BM_CompilePlain)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompilePerLayer)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
