// Python pytrees onto the C++ tools' keys and back (pytree.h), and lazytrace.tree_flatten /
// tree_unflatten.
#include "pytree.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

namespace lazytrace::python {
namespace {

struct Step {
  Py_ssize_t index;
  PyObject* key;  // null: a tuple or list position
};

bool is_namedtuple(nb::handle h) {
  return PyTuple_Check(h.ptr()) && !PyTuple_CheckExact(h.ptr()) &&
         PyObject_HasAttrString(reinterpret_cast<PyObject*>(Py_TYPE(h.ptr())), "_fields");
}

std::string repr_of(nb::handle h) {
  return nb::cast<std::string>(nb::repr(h));
}

metrics::Counter dicts_replayed("DictsReplayed");  // dicts flattened from a DictMemos

// The dict's version (DictMemos), 0 where this Python has none to read
uint64_t dict_version(PyObject* d) {
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // 3.12 and 3.13: deprecated
  return reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
#pragma GCC diagnostic pop
#else
  (void)d;
  return 0;
#endif
}

struct Flattener {
  pytree::Flat& flat;
  TreeDef* def;
  nb::list aux;
  const char* root;
  const char* tool;
  nb::list* keep;
  DictMemos* memos;
  std::vector<Step> path;

  std::string path_str() const {
    std::string s = root;
    for (const Step& st : path) {
      s.append("[").append(st.key ? repr_of(st.key) : std::to_string(st.index)).append("]");
    }
    return s;
  }
  void at_here() {
    if (flat.describing) flat.path = path_str();
  }
  void node(TreeDef::Kind k, uint32_t size, nb::handle a = nb::handle()) {
    if (!def) return;
    int32_t idx = -1;
    if (a.is_valid()) {
      idx = static_cast<int32_t>(nb::len(aux));
      aux.append(a);
    }
    def->nodes.push_back({k, size, idx});
  }
  [[noreturn]] void bad(nb::handle h) {
    throw nb::type_error(
        (std::string("[") + tool + "] " + path_str() + " is " + kind_of(h) +
         "; traced arguments and results hold Tensors in tuples, lists, dicts, namedtuples "
         "and None, with int, float, bool and str as static values. Pass its tensors in one "
         "of those, or let the function close over it.")
            .c_str());
  }

  // Containers nested deeper than this are an error, well before the C stack runs out (a
  // list that contains itself would recurse forever).
  static constexpr size_t kMaxDepth = 1000;
  void check_depth() const {
    if (path.size() >= kMaxDepth)
      throw nb::value_error((std::string("[") + tool + "] " + root + " nests containers more " +
                             "than " + std::to_string(kMaxDepth) +
                             " deep (a list or dict that contains itself?); pass a flatter "
                             "structure.")
                                .c_str());
  }

  // A dict key's word in the key
  uint64_t key_word(PyObject* k) {
    if (PyUnicode_Check(k)) {
      // the str's own hash: computed once per string object and kept by Python (stable
      // within the process, which is what the trace caches need)
      return static_cast<uint64_t>(PyObject_Hash(k));
    } else if (PyLong_Check(k)) {
      return static_cast<uint64_t>(PyObject_Hash(k)) ^ 0x1e7;
    } else {
      throw nb::type_error((std::string("[") + tool + "] " + path_str() +
                            " is a dict with a key of type " + kind_of(k) +
                            "; pytree dicts need str or int keys.")
                               .c_str());
    }
  }

  // after an item of a tuple, list or dict: the root's items are the arguments (args, kwargs)
  void end_item() {
    if (path.size() == 1) flat.end_argument();
    path.pop_back();
  }

  // is_tensor, with the last Tensor subclass seen (nn.Parameter) recognized at once
  PyTypeObject* tensor_subclass = nullptr;
  bool tensor_type(PyObject* o) {
    PyTypeObject* t = Py_TYPE(o);
    if (t == g_tensor_type || t == tensor_subclass) return true;
    if (!PyType_IsSubtype(t, g_tensor_type)) return false;
    tensor_subclass = t;
    return true;
  }

  void walk(nb::handle h) {
    PyObject* o = h.ptr();
    if (tensor_type(o)) {
      at_here();
      flat.add_leaf(tensor_of(h));
      if (keep) keep->append(h);
      if (def) {
        def->nodes.push_back({TreeDef::Leaf, 0, -1});
        ++def->num_leaves;
      }
      return;
    }
    if (o == Py_None) {
      at_here();
      flat.add_node("None");
      node(TreeDef::None, 0);
      return;
    }
    if (PyBool_Check(o)) {
      at_here();
      flat.add_static("bool", o == Py_True ? "True" : "False");
      node(TreeDef::Static, 0, h);
      return;
    }
    if (PyLong_Check(o)) {
      at_here();
      flat.add_static("int", nb::cast<std::string>(nb::str(h)));
      node(TreeDef::Static, 0, h);
      return;
    }
    if (PyFloat_Check(o)) {
      at_here();
      const double d = PyFloat_AS_DOUBLE(o);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      flat.mix(uint64_t{0xf10a7});
      flat.mix(bits);
      flat.describe("float " + repr_of(h));
      node(TreeDef::Static, 0, h);
      return;
    }
    if (PyUnicode_Check(o)) {
      at_here();
      flat.add_static("string", repr_of(h));
      node(TreeDef::Static, 0, h);
      return;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
      check_depth();
      const bool list = PyList_Check(o);
      const bool named = !list && is_namedtuple(h);
      const Py_ssize_t n = list ? PyList_GET_SIZE(o) : PyTuple_GET_SIZE(o);
      at_here();
      if (named) {
        flat.mix(reinterpret_cast<uint64_t>(Py_TYPE(o)));
        flat.add_node(std::string(Py_TYPE(o)->tp_name) + " of " + std::to_string(n));
        node(TreeDef::NamedTuple, static_cast<uint32_t>(n),
             nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(o))));
      } else {
        flat.mix(uint64_t{list ? 0x4cu : 0x54u});
        flat.mix(static_cast<uint64_t>(n));
        if (flat.describing) flat.describe((list ? "list of " : "tuple of ") + std::to_string(n));
        node(list ? TreeDef::List : TreeDef::Tuple, static_cast<uint32_t>(n));
      }
      for (Py_ssize_t i = 0; i < n; ++i) {
        path.push_back({i, nullptr});
        walk(list ? PyList_GET_ITEM(o, i) : PyTuple_GET_ITEM(o, i));
        end_item();
      }
      return;
    }
    if (PyDict_Check(o)) {
      check_depth();
      const Py_ssize_t n = PyDict_Size(o);
      at_here();
      flat.mix(uint64_t{0xd1c7});
      flat.mix(static_cast<uint64_t>(n));
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      if (def || flat.describing) {
        // the tree's definition or the description lists the keys first; the key mixes
        // each key beside its value, below (one pass over the dict on a call's hot path)
        nb::list keys;
        std::string described = "dict with keys [";
        while (PyDict_Next(o, &pos, &k, &v)) {
          if (flat.describing) described += (keys.size() ? ", " : "") + repr_of(k);
          keys.append(nb::handle(k));
        }
        if (flat.describing) flat.describe(described + "]");
        if (def) node(TreeDef::Dict, static_cast<uint32_t>(n), nb::tuple(keys));
        pos = 0;
      }
      // memo_dicts: a dict below the root (the root's items are the arguments), on a call's
      // hot path. A dict is recorded at its second call unchanged, and replayed from its third
      // (a loop that makes a new dict each call never pays for recording it).
      const uint64_t version =
          memos && !def && !keep && !flat.describing && !path.empty() && PyDict_CheckExact(o)
              ? dict_version(o)
              : 0;
      DictMemos::Memo* record = nullptr;
      if (version) {
        DictMemos::Memo* found = nullptr;
        for (DictMemos::Memo& m : memos->slots)
          if (m.dict == o && m.version == version) found = &m;
        if (found && found->state == DictMemos::Memo::Recorded) {
          dicts_replayed.add();
          flat.add_leaves(found->leaves.data(), found->key_words.data(), found->leaves.size());
          return;
        }
        if (found && found->state == DictMemos::Memo::Seen) record = found;
        if (!found && n >= 16)
          memos->slots[memos->next++ % memos->slots.size()] = {
              o, version, DictMemos::Memo::Seen, {}, {}};
      }
      if (record) {
        record->state = DictMemos::Memo::Unfit;  // until every item proves a tensor
        record->key_words.clear();
        record->leaves.clear();
        record->key_words.reserve(n);
        record->leaves.reserve(n);
      }
      // Walking a dict of tensors under exact str or int keys runs no Python code, so the
      // version read before the walk is still the dict's after it.
      while (PyDict_Next(o, &pos, &k, &v)) {
        const uint64_t word = key_word(k);
        flat.absorb(word);
        if (record && (PyUnicode_CheckExact(k) || PyLong_CheckExact(k)) && tensor_type(v) &&
            nb::inst_ready(v)) {
          record->key_words.push_back(word);
          record->leaves.push_back(nb::inst_ptr<Tensor>(v));
        } else {
          record = nullptr;
        }
        path.push_back({0, k});
        walk(v);
        end_item();
      }
      if (record) record->state = DictMemos::Memo::Recorded;
      return;
    }
    bad(h);
  }
};

// leaf(i) gives leaf i as a Python object, of `count`
template <typename Leaf>
nb::object build_at(const TreeDef& d, size_t& node, const Leaf& leaf, size_t count, size_t& at) {
  const TreeDef::Node& n = d.nodes[node++];
  nb::handle aux =
      n.aux >= 0 ? nb::handle(PyTuple_GET_ITEM(d.aux->get().ptr(), n.aux)) : nb::handle();
  switch (n.kind) {
    case TreeDef::Leaf:
      if (at >= count) throw nb::value_error("tree_unflatten: too few leaves");
      return leaf(at++);
    case TreeDef::None:
      return nb::none();
    case TreeDef::Static:
      return nb::borrow(aux);
    case TreeDef::Tuple:
    case TreeDef::NamedTuple: {
      nb::list items;
      for (uint32_t i = 0; i < n.size; ++i) items.append(build_at(d, node, leaf, count, at));
      if (n.kind == TreeDef::Tuple) return nb::tuple(items);
      return aux(*nb::tuple(items));
    }
    case TreeDef::List: {
      nb::list items;
      for (uint32_t i = 0; i < n.size; ++i) items.append(build_at(d, node, leaf, count, at));
      return items;
    }
    case TreeDef::Dict: {
      nb::dict out;
      for (uint32_t i = 0; i < n.size; ++i)
        out[nb::handle(PyTuple_GET_ITEM(aux.ptr(), i))] = build_at(d, node, leaf, count, at);
      return out;
    }
  }
  throw nb::value_error("tree_unflatten: a corrupt tree spec");
}

void str_at(const TreeDef& d, size_t& node, std::string& s) {
  const TreeDef::Node& n = d.nodes[node++];
  nb::handle aux =
      n.aux >= 0 ? nb::handle(PyTuple_GET_ITEM(d.aux->get().ptr(), n.aux)) : nb::handle();
  auto items = [&](const char* open, const char* close) {
    s += open;
    for (uint32_t i = 0; i < n.size; ++i) {
      if (i) s += ", ";
      if (n.kind == TreeDef::Dict) s += repr_of(PyTuple_GET_ITEM(aux.ptr(), i)) + ": ";
      str_at(d, node, s);
    }
    if (n.kind == TreeDef::Tuple && n.size == 1) s += ",";
    s += close;
  };
  switch (n.kind) {
    case TreeDef::Leaf:
      s += "*";
      return;
    case TreeDef::None:
      s += "None";
      return;
    case TreeDef::Static:
      s += repr_of(aux);
      return;
    case TreeDef::Tuple:
      return items("(", ")");
    case TreeDef::NamedTuple:
      s += nb::cast<std::string>(aux.attr("__name__"));
      return items("(", ")");
    case TreeDef::List:
      return items("[", "]");
    case TreeDef::Dict:
      return items("{", "}");
  }
}

// the Tensor objects of a tree already flattened (so well formed), in flatten order
void collect_leaves(nb::handle h, nb::list& out) {
  PyObject* o = h.ptr();
  if (is_tensor(h)) {
    out.append(h);
  } else if (PyTuple_Check(o) || PyList_Check(o)) {
    for (nb::handle item : h) collect_leaves(item, out);
  } else if (PyDict_Check(o)) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &v)) collect_leaves(v, out);
  }
}

}  // namespace

void flatten_tree(nb::handle tree, pytree::Flat& flat, TreeDef* def, const char* root,
                  const char* tool, nb::list* keep, DictMemos* memos) {
  Flattener f{flat, def, nb::list(), root, tool, keep, memos, {}};
  f.walk(tree);
  if (def) def->aux = std::make_shared<PyRef>(nb::tuple(f.aux));
}

nb::object TreeDef::build(const std::vector<Tensor>& leaves, size_t& at) const {
  size_t node = 0;
  return build_at(
      *this, node, [&](size_t i) { return nb::cast(leaves[i]); }, leaves.size(), at);
}

nb::object TreeDef::build(nb::handle leaves) const {
  nb::list items(leaves);
  size_t node = 0, at = 0;
  if (items.size() != num_leaves)
    throw nb::value_error(("tree_unflatten: the spec has " + std::to_string(num_leaves) +
                           " leaves, got " + std::to_string(items.size()))
                              .c_str());
  return build_at(
      *this, node, [&](size_t i) { return nb::borrow(items[i]); }, items.size(), at);
}

nb::object TreeDef::build(const std::vector<Tensor>& leaves) const {
  size_t at = 0;
  nb::object out = build(leaves, at);
  if (at != leaves.size())
    throw nb::value_error(("tree_unflatten: the spec has " + std::to_string(num_leaves) +
                           " leaves, got " + std::to_string(leaves.size()))
                              .c_str());
  return out;
}

std::string TreeDef::str() const {
  std::string s;
  size_t node = 0;
  if (!nodes.empty()) str_at(*this, node, s);
  return s;
}

bool TreeDef::operator==(const TreeDef& o) const {
  if (nodes.size() != o.nodes.size()) return false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &a = nodes[i], &b = o.nodes[i];
    if (a.kind != b.kind || a.size != b.size) return false;
    if (a.aux >= 0 && !nb::handle(PyTuple_GET_ITEM(aux->get().ptr(), a.aux))
                           .equal(nb::handle(PyTuple_GET_ITEM(o.aux->get().ptr(), b.aux))))
      return false;
  }
  return true;
}

void bind_pytree(nb::module_& m) {
  nb::class_<TreeDef>(m, "TreeSpec", "The structure of a pytree (lazytrace.tree_flatten).")
      .def_prop_ro("num_leaves", [](const TreeDef& d) { return d.num_leaves; })
      .def("__repr__", [](const TreeDef& d) { return "TreeSpec(" + d.str() + ")"; })
      .def("__eq__", [](const TreeDef& a, const TreeDef& b) { return a == b; })
      .def("__hash__", [](const TreeDef& d) { return std::hash<std::string>()(d.str()); });
  m.def(
      "tree_flatten",
      [](nb::handle tree) {
        pytree::Flat flat;
        TreeDef def;
        flatten_tree(tree, flat, &def, "tree", "tree_flatten");
        nb::list leaves;  // the tree's own objects, not new handles
        collect_leaves(tree, leaves);
        return std::make_pair(leaves, def);
      },
      nb::arg("tree").none(),
      "The tree's Tensor leaves (depth first, dicts in insertion order) and its structure.");
  m.def(
      "tree_unflatten", [](const TreeDef& spec, nb::handle leaves) { return spec.build(leaves); },
      nb::arg("spec"), nb::arg("leaves"));
}

}  // namespace lazytrace::python
