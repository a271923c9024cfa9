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
 * layer's own parameters. With is_layer_pure the traced layer is cached per template layer,
 * signature and train()/eval() mode, so later calls trace nothing; the layer must then
 * depend only on its parameters, buffers and arguments.
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

/** scan over the weights `params` and `buffers` stacked [n, ...], running `layer`. */
template <typename M, typename C, typename... Extra>
C scan_weights(const std::shared_ptr<M>& layer, ParamMap params, ParamMap buffers, int64_t n,
               const C& input, ScanLayersOptions options, const Extra&... extra) {
  // the weights are the xs; weightless layers scan over their index
  using X = std::tuple<ParamMap, ParamMap, std::vector<Tensor>>;
  X xs{std::move(params), std::move(buffers), {}};
  if (std::get<0>(xs).empty() && std::get<1>(xs).empty())
    std::get<2>(xs).push_back(arange(static_cast<double>(n)));
  // the layer that is traced (its tensors are swapped for one slice of the stacks); held
  // by the traced function, which a cache may keep
  auto fn = [layer](const C& carry, const X& w, const std::tuple<Extra...>& consts) {
    C out = std::apply(
        [&](const Extra&... e) {
          return C(functional_call(*layer, std::get<0>(w), std::get<1>(w), carry, e...));
        },
        consts);
    return std::pair{out, Tree()};
  };
  ScanOptions so;
  so.is_fn_pure = options.is_layer_pure;
  so.remat = options.remat;
  return tools::scan_with(fn, input, xs, std::tuple<Extra...>{extra...}, so, tools::identity_of(fn),
                          "scan_layers")
      .first;
}
}  // namespace detail

template <typename M, typename C, typename... Extra>
C scan_layers(const std::vector<std::shared_ptr<M>>& layers, const C& input,
              ScanLayersOptions options = {}, const Extra&... extra) {
  if (layers.empty()) return input;
  std::vector<const Module*> mods;
  for (const auto& l : layers) mods.push_back(l.get());
  detail::check_layers(mods);
  return detail::scan_weights(layers[0], detail::stack_layers(mods, false),
                              detail::stack_layers(mods, true), static_cast<int64_t>(mods.size()),
                              input, options, extra...);
}

/**
 * Keeps the layers' weights stacked, as flax's nn.scan does: each parameter and buffer of
 * `holder` (a module of the layers' type) becomes the stack [L, ...] of the layers' own
 * (parameters as leaves that require grad). A model that trains the stacks has one
 * parameter per name whatever its depth, so its optimizer, like its layers, adds nothing
 * to a step's graph per layer. Run them with scan_stacked().
 */
void stack_layers_into(Module& holder, const std::vector<const Module*>& layers);

/**
 * scan_layers over weights kept stacked in `stacked` (see stack_layers_into), running
 * `layer`, a module of the same type with one layer's shapes, on each slice.
 */
template <typename M, typename C, typename... Extra>
C scan_stacked(const std::shared_ptr<M>& layer, const Module& stacked, const C& input,
               ScanLayersOptions options = {}, const Extra&... extra) {
  ParamMap params = stacked.named_parameters(), buffers = stacked.named_buffers();
  const ParamMap& any = params.empty() ? buffers : params;
  if (any.empty())
    fail("scan_layers",
         "the stacked module has no parameters or buffers, so no depth; use "
         "scan_layers with the list of layers.");
  const int64_t n = any.begin()->second.shape()[0];
  return detail::scan_weights(layer, std::move(params), std::move(buffers), n, input, options,
                              extra...);
}

/** scan_layers over a ModuleList whose modules are all of type M. */
template <typename M, typename C, typename... Extra>
C scan_layers(const ModuleList& layers, const C& input, ScanLayersOptions options = {},
              const Extra&... extra) {
  std::vector<std::shared_ptr<M>> typed;
  for (size_t i = 0; i < layers.size(); ++i) typed.push_back(layers.at<M>(i));
  return scan_layers(typed, input, options, extra...);
}
/** The same for a model's ModuleList member (`scan_layers<DecoderLayer>(model->layers, h)`). */
template <typename M, typename C, typename... Extra>
C scan_layers(const std::shared_ptr<ModuleList>& layers, const C& input,
              ScanLayersOptions options = {}, const Extra&... extra) {
  if (!layers) fail("scan_layers", "the ModuleList is null.");
  return scan_layers<M>(*layers, input, options, extra...);
}
/** Without the layers' type a ModuleList cannot be scanned: it is named, as above. */
template <typename C, typename... Extra>
C scan_layers(const std::shared_ptr<ModuleList>&, const C&, ScanLayersOptions = {},
              const Extra&...) {
  static_assert(sizeof(C) == 0,
                "scan_layers over a ModuleList needs the layers' type, which calls their "
                "forward: scan_layers<DecoderLayer>(model->layers, h)");
}

}  // namespace lazytrace::nn
