#include "lazytrace/trace/tree.h"

#include <algorithm>

namespace lazytrace {

Tree::Tree(Tensor t) : kind_(Kind::leaf), leaf_(std::move(t)) {
  if (!leaf_.defined()) fail("Tree", "a leaf must be a defined tensor; use Tree() for None.");
}

Tree Tree::list(std::vector<Tree> items) {
  Tree t;
  t.kind_ = Kind::list;
  t.items_ = std::move(items);
  return t;
}

Tree Tree::dict(std::vector<std::pair<std::string, Tree>> items) {
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Tree t;
  t.kind_ = Kind::dict;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && items[i].first == t.keys_.back())  // items[i - 1].first was moved
      fail("Tree", "the key '", items[i].first, "' appears twice in a dict.");
    t.keys_.push_back(std::move(items[i].first));
    t.items_.push_back(std::move(items[i].second));
  }
  return t;
}

const Tensor& Tree::tensor() const {
  if (kind_ != Kind::leaf)
    fail("Tree", "tensor() needs a leaf, but this tree is ", structure(), ".");
  return leaf_;
}

const Tree& Tree::operator[](size_t i) const {
  if (kind_ != Kind::list)
    fail("Tree", "[", i, "] needs a list, but this tree is ", structure(), ".");
  if (i >= items_.size())
    fail("Tree", "index ", i, " is out of range for a list of ", items_.size(), ".");
  return items_[i];
}

const Tree& Tree::operator[](const std::string& key) const {
  if (kind_ != Kind::dict)
    fail("Tree", "['", key, "'] needs a dict, but this tree is ", structure(), ".");
  auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
  if (it == keys_.end() || *it != key) fail("Tree", "no key '", key, "' in ", structure(), ".");
  return items_[static_cast<size_t>(it - keys_.begin())];
}

size_t Tree::size() const {
  switch (kind_) {
    case Kind::none:
      return 0;
    case Kind::leaf:
      return 1;
    case Kind::list:
    case Kind::dict:
      return items_.size();
  }
  return items_.size();
}

std::vector<std::string> Tree::keys() const {
  return keys_;
}

void Tree::collect(std::vector<Tensor>& out) const {
  if (kind_ == Kind::leaf) out.push_back(leaf_);
  for (const Tree& t : items_) t.collect(out);
}

std::vector<Tensor> Tree::leaves() const {
  std::vector<Tensor> out;
  collect(out);
  return out;
}

Tree Tree::rebuild(const std::vector<Tensor>& leaves, size_t& at) const {
  if (kind_ == Kind::none) return Tree();
  if (kind_ == Kind::leaf) {
    if (at >= leaves.size())
      fail("Tree", "with_leaves got ", leaves.size(), " tensors for a tree with more leaves.");
    return Tree(leaves[at++]);
  }
  Tree t;
  t.kind_ = kind_;
  t.keys_ = keys_;
  for (const Tree& item : items_) t.items_.push_back(item.rebuild(leaves, at));
  return t;
}

Tree Tree::with_leaves(const std::vector<Tensor>& leaves) const {
  size_t at = 0;
  Tree t = rebuild(leaves, at);
  if (at != leaves.size())
    fail("Tree", "with_leaves got ", leaves.size(), " tensors for a tree of ", at, " leaves.");
  return t;
}

Tree Tree::map(const std::function<Tensor(const Tensor&)>& f) const {
  std::vector<Tensor> ls = leaves();
  for (Tensor& t : ls) t = f(t);
  return with_leaves(ls);
}

std::string Tree::structure() const {
  switch (kind_) {
    case Kind::none:
      return "None";
    case Kind::leaf:
      return "*";
    case Kind::list: {
      std::string s = "[";
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) s += ", ";
        s += items_[i].structure();
      }
      s += "]";
      return s;
    }
    case Kind::dict: {
      std::string s = "{";
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) s += ", ";
        s.append(keys_[i]).append(": ").append(items_[i].structure());
      }
      s += "}";
      return s;
    }
  }
  return "";
}

bool Tree::path_of(size_t& i, std::string& path) const {
  if (kind_ == Kind::leaf) {
    if (i == 0) return true;
    --i;
    return false;
  }
  for (size_t k = 0; k < items_.size(); ++k) {
    std::string sub;
    if (items_[k].path_of(i, sub)) {
      if (kind_ == Kind::dict)
        path.append("['").append(keys_[k]).append("']");
      else
        path.append("[").append(std::to_string(k)).append("]");
      path += sub;
      return true;
    }
  }
  return false;
}

std::string Tree::leaf_path(size_t i) const {
  std::string path;
  path_of(i, path);
  return path;
}

}  // namespace lazytrace
