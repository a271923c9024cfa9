#pragma once
/**
 * Tree: a pytree of tensors, as JAX has them: None, a leaf Tensor, a list of trees, or a
 * dict of trees with string keys (kept sorted by key, as JAX sorts them). The tools
 * (assume_pure, compile, scan) take and return trees; their structure is part of a cache
 * key and their leaves are the tensors that flow.
 */
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lazytrace/trace/tensor.h"

namespace lazytrace {

class Tree {
 public:
  enum class Kind { none, leaf, list, dict };

  /** None. */
  Tree() = default;
  /** A leaf. */
  Tree(Tensor t);  // NOLINT: a tensor is a tree
  static Tree list(std::vector<Tree> items);
  static Tree dict(std::vector<std::pair<std::string, Tree>> items);

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_leaf() const { return kind_ == Kind::leaf; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }

  /** The leaf's tensor; lt::Error for any other kind. */
  const Tensor& tensor() const;
  /** Item i of a list. */
  const Tree& operator[](size_t i) const;
  const Tree& operator[](int i) const { return (*this)[static_cast<size_t>(i)]; }
  /** The value under `key` of a dict. */
  const Tree& operator[](const std::string& key) const;
  const Tree& operator[](const char* key) const { return (*this)[std::string(key)]; }
  /** Items of a list or dict; 0 for None, 1 for a leaf. */
  size_t size() const;
  /** A dict's keys, sorted. */
  std::vector<std::string> keys() const;
  /** Every leaf, depth first (dict values in key order). */
  std::vector<Tensor> leaves() const;

  /** The same structure with `leaves` in place of this tree's leaves, in order. */
  Tree with_leaves(const std::vector<Tensor>& leaves) const;
  /** The same structure with f applied to each leaf. */
  Tree map(const std::function<Tensor(const Tensor&)>& f) const;
  /** The structure alone, e.g. "{count: *, sum: [*, None]}"; equal iff structures are. */
  std::string structure() const;
  /** The path of leaf i, e.g. "['sum'][1]", for messages. */
  std::string leaf_path(size_t i) const;

 private:
  void collect(std::vector<Tensor>& out) const;
  Tree rebuild(const std::vector<Tensor>& leaves, size_t& at) const;
  bool path_of(size_t& i, std::string& path) const;

  Kind kind_ = Kind::none;
  Tensor leaf_;
  std::vector<Tree> items_;
  std::vector<std::string> keys_;  // dict only, sorted; parallel to items_
};

}  // namespace lazytrace
