#pragma once
// Python pytrees: tuples, lists, dicts (insertion order), None and namedtuples of Tensor
// leaves, with int/float/bool/str as static values. Flattening feeds the C++ tools' keys
// (pytree::Flat: the structure, static values, leaf shapes and dtypes) and keeps what
// rebuilding needs (TreeDef); anything else is a TypeError naming its path.
#include <array>
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
 * Dicts of tensors that a function's calls flattened before (the pass memo_dicts), each with
 * the dict's version then. CPython gives a dict a new version, from one counter for every
 * dict, at each change, so while a dict at that address has that version it holds the same
 * objects: flattening it again replays what the walk found, without the walk.
 * (pytree.cpp's dict walk says when a dict is recorded.)
 */
struct DictMemos {
  struct Memo {
    const PyObject* dict = nullptr;  // compared, never followed: the version vouches for it
    uint64_t version = 0;
    // Seen once; Recorded: the items below; Unfit: an item is not a tensor under a str or int
    enum State : uint8_t { Seen, Recorded, Unfit } state = Seen;
    std::vector<uint64_t> key_words;    // each key's word in the key
    std::vector<const Tensor*> leaves;  // each value's Tensor, inside its Python object
  };
  std::array<Memo, 4> slots;
  size_t next = 0;  // the slot the next new dict takes
};

/**
 * Flattens `tree` into `flat` (leaves by address) and, if `def` is given, its structure.
 * `root` names the tree in errors ("args"), `tool` the caller ("[assume_pure] args[1]['w'] is
 * a ..."). The leaves' addresses stay valid while their Python objects live: where Python
 * code runs before `flat` is last read (a traced function may drop what the tree held),
 * pass `keep`, which takes a reference to every leaf.
 */
void flatten_tree(nb::handle tree, pytree::Flat& flat, TreeDef* def, const char* root,
                  const char* tool, nb::list* keep = nullptr, DictMemos* memos = nullptr);

}  // namespace lazytrace::python
