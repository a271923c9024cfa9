#include "lazytrace/nn/scan_layers.h"

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace::nn::detail {

namespace {

void check_map(const char* kind, size_t i, const ParamMap& first, const ParamMap& other) {
  for (const auto& [name, t] : first) {
    const Tensor* o = other.find(name);
    if (!o)
      fail("scan_layers", "layer ", i, " does not match layer 0: it has no ", kind, " '", name,
           "' (", t.type_str(),
           " in layer 0). scan_layers needs layers of identical "
           "structure; run layers that differ in a plain loop.");
    if (o->shape() != t.shape() || o->dtype() != t.dtype())
      fail("scan_layers", "layer ", i, " does not match layer 0: ", kind, " '", name, "' is ",
           o->type_str(), " in layer ", i, " but ", t.type_str(),
           " in layer 0. scan_layers "
           "needs layers of identical structure; run layers that differ in a plain loop.");
  }
  for (const auto& [name, t] : other)
    if (!first.contains(name))
      fail("scan_layers", "layer ", i, " does not match layer 0: it has an extra ", kind, " '",
           name, "' (", t.type_str(),
           ") that layer 0 lacks. scan_layers needs layers of "
           "identical structure; run layers that differ in a plain loop.");
}

}  // namespace

void check_layers(const std::vector<const Module*>& layers) {
  for (size_t i = 0; i < layers.size(); ++i)
    if (!layers[i])
      fail("scan_layers", "layer ", i, " of ", layers.size(),
           " is null; pass modules made with std::make_shared.");
  const ParamMap p0 = layers[0]->named_parameters(), b0 = layers[0]->named_buffers();
  for (size_t i = 1; i < layers.size(); ++i) {
    check_map("parameter", i, p0, layers[i]->named_parameters());
    check_map("buffer", i, b0, layers[i]->named_buffers());
  }
}

ParamMap stack_layers(const std::vector<const Module*>& layers, bool buffers) {
  std::vector<ParamMap> maps;
  for (const Module* m : layers)
    maps.push_back(buffers ? m->named_buffers() : m->named_parameters());
  ParamMap out;
  for (const auto& [name, t] : maps[0]) {
    std::vector<Tensor> parts;
    for (const ParamMap& m : maps) parts.push_back(m.at(name));
    out.insert(name, stack(parts));
  }
  return out;
}

}  // namespace lazytrace::nn::detail

namespace lazytrace::nn {

void stack_layers_into(Module& holder, const std::vector<const Module*>& layers) {
  if (layers.empty()) fail("scan_layers", "stack_layers_into needs at least one layer.");
  detail::check_layers(layers);
  NoGradGuard no_grad;
  ParamMap params = detail::stack_layers(layers, false),
           buffers = detail::stack_layers(layers, true);
  std::vector<Tensor> all = params.values();
  for (const Tensor& t : buffers.values()) all.push_back(t);
  sync(all);
  holder.replace_tensors(params, buffers);
}

}  // namespace lazytrace::nn
