// The basic layers. Initial values are recorded lazily like any op: a model's
// initialization runs at the first sync, in one graph.
#include "lazytrace/nn/layers.h"

#include <cxxabi.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "lazytrace/ops/autocast.h"
#include "lazytrace/ops/ops.h"
#include "ops/checks.h"

namespace lazytrace::nn {
namespace {

Tensor uniform(const Shape& shape, double bound) {
  return (rand(shape) * 2 - 1) * bound;
}

// `config` makes the layer's description, e.g. "Linear(4, 3)" (only for a message).
template <typename Config>
void check_features(const char* layer, const Config& config, const Tensor& x, int64_t expected) {
  if (!x.defined()) fail(layer, "the input is an undefined tensor.");
  if (x.ndim() == 0 || x.shape()[x.ndim() - 1] != expected)
    fail(layer, "input ", x.type_str(), " must have ", expected,
         " features in its last dim, as this ", config(), " expects.");
  if (!is_floating(x.dtype()))
    fail(layer, "input ", x.type_str(), " must be floating; convert with astype(x, lt::float32).");
}

// Computes 16-bit inputs in float32, as PyTorch's fused norms do.
Tensor widen(const Tensor& x) {
  return itemsize(x.dtype()) == 2 ? astype(x, DType::float32) : x;
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0)
    fail("Linear", "in_features and out_features must be positive, got ", in, " and ", out, ".");
  const double bound = 1 / std::sqrt(static_cast<double>(in));
  weight = uniform({out, in}, bound);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = uniform({out}, bound);
    register_parameter("bias", bias);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  check_features(
      "Linear",
      [&] {
        return "Linear(" + std::to_string(in_features) + ", " + std::to_string(out_features) + ")";
      },
      x, in_features);
  // under autocast: the weight cast as stored (a read in order), the bias too (torch's)
  Tensor y = matmul(x, transpose(ops::autocast_lower(weight)));
  return bias.defined() ? y + ops::autocast_lower(bias) : y;
}

Embedding::Embedding(int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {
  if (num <= 0 || dim <= 0)
    fail("Embedding", "num_embeddings and embedding_dim must be positive, got ", num, " and ", dim,
         ".");
  weight = randn({num, dim});
  register_parameter("weight", weight);
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  if (!indices.defined()) fail("Embedding", "the indices are an undefined tensor.");
  if (!weight.defined()) fail("Embedding", "the weight is an undefined tensor.");
  if (indices.dtype() != DType::int32 && indices.dtype() != DType::int64)
    fail("Embedding", "indices must be int32 or int64, got ", indices.type_str(),
         "; convert with astype(indices, lt::int64).");
  if (weight.ndim() != 2)
    fail("Embedding", "the weight must be [num_embeddings, embedding_dim], got ", weight.type_str(),
         ".");
  // indices computed in the graph are checked when the rows are; host data now
  Tensor checked =
      ops::check_indices(indices, weight.shape()[0], 0, ops::IndexCheck::EmbeddingIndices);
  if (!indices.is_pending()) sync({checked});
  std::vector<int64_t> shape = indices.shape().vec();
  Tensor rows = index_select(weight, 0, reshape(checked, {-1}));
  shape.push_back(weight.shape()[1]);
  return reshape(rows, Shape(shape));
}

Tensor Embedding::forward(const Tensor& indices) const {
  return embedding(indices, weight);
}

LayerNorm::LayerNorm(int64_t d, double e, bool affine) : dim(d), eps(e) {
  if (d <= 0) fail("LayerNorm", "dim must be positive, got ", d, ".");
  if (affine) {
    weight = ones({d});
    bias = zeros({d});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  check_features(
      "LayerNorm", [&] { return "LayerNorm(" + std::to_string(dim) + ")"; }, x, dim);
  Tensor h = widen(x);
  Tensor centered = h - mean(h, {-1}, true);
  Tensor y = centered * rsqrt(mean(centered * centered, {-1}, true) + eps);
  if (weight.defined()) y = y * weight + bias;
  return astype(y, x.dtype());
}

RMSNorm::RMSNorm(int64_t d, double e) : dim(d), eps(e) {
  if (d <= 0) fail("RMSNorm", "dim must be positive, got ", d, ".");
  weight = ones({d});
  register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  check_features(
      "RMSNorm", [&] { return "RMSNorm(" + std::to_string(dim) + ")"; }, x, dim);
  Tensor h = widen(x);
  Tensor y = h * rsqrt(mean(h * h, {-1}, true) + eps);
  return astype(y * weight, x.dtype());
}

Dropout::Dropout(double prob) : p(prob) {
  if (!(prob >= 0 && prob <= 1)) fail("Dropout", "p must be in [0, 1], got ", prob, ".");
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p == 0) return x;
  if (p == 1) return x * 0;
  const DType dt = is_floating(x.dtype()) ? x.dtype() : DType::float32;
  // a rank's examples of a global batch: their masks are the global batch's (BatchRows),
  // x read as one row per example (batch first, or its example-major flattening)
  const BatchRows rows = batch_rows();
  const bool global = rows.count > 0 && x.numel() > 0 && x.numel() % rows.count == 0;
  const Tensor u =
      global ? reshape(rand_rows({rows.count, x.numel() / rows.count}, rows.first, rows.total, dt),
                       x.shape())
             : rand(x.shape(), dt);
  return where(u >= p, x * (1 / (1 - p)), 0);
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  if (i >= modules_.size())
    fail("ModuleList", "index ", i, " is out of range for a list of ", modules_.size(),
         " modules.");
  return modules_[i];
}

void ModuleList::bad_type(size_t i, const std::type_info& asked) const {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(asked.name(), nullptr, nullptr, &status), std::free);
  fail("ModuleList", "module ", i, " is a ", modules_[i]->name(), ", not the ",
       status == 0 ? name.get() : asked.name(), " asked for: at<M>(", i,
       ") needs M to be the module's own type or a base of it.");
}

}  // namespace lazytrace::nn
