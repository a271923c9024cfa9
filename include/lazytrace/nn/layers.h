#pragma once
/** The basic layers, with PyTorch's parameter names, shapes and initialization. */
#include <cstdint>
#include <memory>
#include <typeinfo>
#include <vector>

#include "lazytrace/nn/module.h"

namespace lazytrace::nn {

/** y = x @ weight^T + bias; weight [out, in], bias [out], both U(-1/sqrt(in), 1/sqrt(in)). */
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "Linear"; }

  Tensor weight, bias;  // bias is undefined without bias
  int64_t in_features, out_features;
};

/**
 * Rows of weight [num, dim] picked by int32/int64 indices of any shape S: S + [dim], as
 * torch.nn.functional.embedding. An index outside [0, num) is an lt::Error (negative
 * indices do not wrap): now for host data, when the result is computed for indices computed
 * in the graph.
 */
Tensor embedding(const Tensor& indices, const Tensor& weight);

/** Rows of weight [num, dim] (N(0, 1) at start) picked by integer indices of any shape. */
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  /** indices: int32/int64 of shape S; result: S + [dim]. */
  Tensor forward(const Tensor& indices) const;
  Tensor operator()(const Tensor& indices) const { return forward(indices); }
  std::string name() const override { return "Embedding"; }

  Tensor weight;
  int64_t num_embeddings, embedding_dim;
};

/** Normalizes the last dim to mean 0 and variance 1, then scales (weight) and shifts (bias). */
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "LayerNorm"; }

  Tensor weight, bias;  // ones and zeros at start; undefined without elementwise_affine
  int64_t dim;
  double eps;
};

/** x / sqrt(mean(x^2, last dim) + eps) * weight (weight: ones at start). */
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "RMSNorm"; }

  Tensor weight;
  int64_t dim;
  double eps;
};

/** In training, zeroes each element with probability p and scales the rest by 1/(1-p). */
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "Dropout"; }

  double p;
};

/** An indexed list of submodules, named "0", "1", ... */
class ModuleList : public Module {
 public:
  ModuleList() = default;
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  /** The i-th module as its own type; lt::Error if it is another type. */
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!m) bad_type(i, typeid(M));
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  std::string name() const override { return "ModuleList"; }

 private:
  [[noreturn]] void bad_type(size_t i, const std::type_info& asked) const;
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace lazytrace::nn
