#pragma once
/**
 * scan_layers: N layers of identical structure run as one scan over their stacked
 * weights, like torch_xla's scan_layers: the layer is traced once and compiled once, so
 * tracing and compile time stay flat in depth.
 *
 *   h = lt::nn::scan_layers(layers, h);                       // std::vector<std::shared_ptr<M>>
 *   h = lt::nn::scan_layers<DecoderLayer>(model->layers, h);  // a ModuleList of M
 *   h = lt::nn::scan_layers(layers, h, {.remat = lt::Remat::recompute}, mask);
 *
 * Every layer must have the first one's parameter and buffer names, shapes and dtypes
 * (else lt::Error naming the layer and the parameter). The layers' forward takes the carry
 * (a Tensor, or a tuple of tensors it returns in the same form) and then the extra
 * arguments, which are the same for every layer (an attention mask). Gradients reach each
 * layer's own parameters. With is_layer_pure the traced layer is cached per layer type and
 * signature, so later calls trace nothing; the layer must then depend only on its
 * parameters, buffers and arguments.
 */
#include <memory>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

#include "lazytrace/nn/layers.h"
#include "lazytrace/nn/module.h"
#include "lazytrace/ops/ops.h"
#include "lazytrace/tools/scan.h"

namespace lazytrace::nn {

struct ScanLayersOptions {
  bool is_layer_pure = false;
  Remat remat = Remat::save;
};

namespace detail {
/** Layer i's parameters and buffers must match layer 0's (lt::Error otherwise). */
void check_layers(const std::vector<const Module*>& layers);
/** Each parameter (buffers: each buffer) of the layers, stacked along a new first dim. */
ParamMap stack_layers(const std::vector<const Module*>& layers, bool buffers);
}  // namespace detail

template <typename M, typename C, typename... Extra>
C scan_layers(const std::vector<std::shared_ptr<M>>& layers, const C& input,
              ScanLayersOptions options = {}, const Extra&... extra) {
  if (layers.empty()) return input;
  std::vector<const Module*> mods;
  for (const auto& l : layers) mods.push_back(l.get());
  detail::check_layers(mods);
  // the weights are the xs; weightless layers scan over their index
  using X = std::tuple<ParamMap, ParamMap, std::vector<Tensor>>;
  X xs{detail::stack_layers(mods, false), detail::stack_layers(mods, true), {}};
  if (std::get<0>(xs).empty() && std::get<1>(xs).empty())
    std::get<2>(xs).push_back(arange(static_cast<double>(layers.size())));
  // the layer that is traced (its tensors are swapped for one slice of the stacks); held
  // by the traced function, which a cache may keep
  std::shared_ptr<M> first = layers[0];
  auto fn = [first](const C& carry, const X& w, const std::tuple<Extra...>& consts) {
    C out = std::apply(
        [&](const Extra&... e) {
          return C(functional_call(*first, std::get<0>(w), std::get<1>(w), carry, e...));
        },
        consts);
    return std::pair{out, Tree()};
  };
  ScanOptions so;
  so.is_fn_pure = options.is_layer_pure;
  so.remat = options.remat;
  return tools::scan_with(fn, input, xs, std::tuple<Extra...>{extra...}, so, typeid(fn).hash_code(),
                          "scan_layers")
      .first;
}

/** scan_layers over a ModuleList whose modules are all of type M. */
template <typename M, typename C, typename... Extra>
C scan_layers(const ModuleList& layers, const C& input, ScanLayersOptions options = {},
              const Extra&... extra) {
  std::vector<std::shared_ptr<M>> typed;
  for (size_t i = 0; i < layers.size(); ++i) typed.push_back(layers.at<M>(i));
  return scan_layers(typed, input, options, extra...);
}

}  // namespace lazytrace::nn
