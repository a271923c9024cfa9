#pragma once
// Python pytrees: tuples, lists, dicts (insertion order), None and namedtuples of Tensor
// leaves, with int/float/bool/str as static values. Flattening feeds the C++ tools' keys
// (pytree::Flat: the structure, static values, leaf shapes and dtypes) and keeps what
// rebuilding needs (TreeDef); anything else is a TypeError naming its path.
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"

namespace lazytrace::python {

/** The structure of a Python pytree, in pre-order, without its leaves. */
struct TreeDef {
  enum Kind : uint8_t { Leaf, None, Tuple, List, Dict, NamedTuple, Static };
  struct Node {
    Kind kind;
    uint32_t size;     // children (Tuple, List, Dict, NamedTuple)
    int32_t aux = -1;  // index into `aux`: a dict's keys (a tuple), a namedtuple's type, a value
  };
  std::vector<Node> nodes;
  size_t num_leaves = 0;
  std::shared_ptr<PyRef> aux;  // a tuple; held without the GIL by traced entries

  /** The tree with `leaves` (consumed from `at`) in place of the leaves. */
  nb::object build(const std::vector<Tensor>& leaves, size_t& at) const;
  nb::object build(const std::vector<Tensor>& leaves) const;
  /** The tree with these Python objects as its leaves (tree_unflatten). */
  nb::object build(nb::handle leaves) const;
  /** "(*, {'w': *})": the structure, for messages and repr. */
  std::string str() const;
  bool operator==(const TreeDef& o) const;
};

/**
 * Flattens `tree` into `flat` (leaves by address) and, if `def` is given, its structure.
 * `root` names the tree in errors ("args"), `tool` the caller ("[assume_pure] args[1]['w'] is
 * a ..."). The leaves' addresses stay valid while their Python objects live: where Python
 * code runs before `flat` is last read (a traced function may drop what the tree held),
 * pass `keep`, which takes a reference to every leaf.
 */
void flatten_tree(nb::handle tree, pytree::Flat& flat, TreeDef* def, const char* root,
                  const char* tool, nb::list* keep = nullptr);

}  // namespace lazytrace::python
