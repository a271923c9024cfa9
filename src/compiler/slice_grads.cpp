// The slice_grads pass: a sum of gradients of slices of one tensor becomes one concat of
// the slices' gradients. Slice's VJP is the slice's gradient between zeros (a concat), so
// without it a loop over L slices of a stacked weight sums L tensors of the weight's size,
// all live at once; with it the gradient costs the weight's size once. Requires: cse (use
// counts final). Provides: one concat per sum; the concats and adds it replaces are left
// unread, for DCE.
#include <algorithm>
#include <map>

#include "compiler/passes.h"
#include "compiler/rebuild.h"

namespace lazytrace::compiler {
namespace {

using ir::GNode;
using ir::OpKind;

// A window [offset, offset + len) along a concat's dim that holds a non-zero part.
struct Piece {
  int64_t offset, len;
  int node;
};

// A concat of parts some of which are zeros (BroadcastTo of a literal 0).
struct Scatter {
  int leaf;       // the concat
  int zero = -1;  // its zero scalar
  std::vector<Piece> pieces;
};

int concat_dim(const GNode& n) {
  const int64_t d = n.attrs[0];
  return static_cast<int>(d < 0 ? d + n.shape.size() : d);
}

bool scatter_of(const ir::Graph& g, int i, Scatter& out) {
  const GNode& n = g.nodes[static_cast<size_t>(i)];
  if (n.op != OpKind::Concat) return false;
  const int dim = concat_dim(n);
  out = {i, -1, {}};
  int64_t at = 0;
  for (int in : n.inputs) {
    const GNode& part = g.nodes[static_cast<size_t>(in)];
    const GNode* src = part.op == OpKind::BroadcastTo ? &g.nodes[part.inputs[0]] : nullptr;
    if (src && src->op == OpKind::Scalar && !src->scalar_is_param && src->value == 0)
      out.zero = part.inputs[0];
    else
      out.pieces.push_back({at, part.shape[dim], in});
    at += part.shape[dim];
  }
  return out.zero >= 0;
}

// One concat's worth of windows along a dim: sorted, none overlapping; each window's parts
// add up (a slice read twice).
struct Layer {
  std::vector<Piece> windows;
  std::vector<std::vector<int>> parts;
};

// The scatters' windows in as few layers as their overlaps allow (one where none overlap).
std::vector<Layer> layers_of(const std::vector<Scatter>& scatters) {
  std::vector<Piece> all;
  for (const Scatter& s : scatters) all.insert(all.end(), s.pieces.begin(), s.pieces.end());
  std::sort(all.begin(), all.end(), [](const Piece& a, const Piece& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.node < b.node;
  });
  std::vector<Layer> layers;
  for (const Piece& p : all) {
    bool placed = false;
    for (Layer& l : layers) {
      const Piece& last = l.windows.back();
      if (last.offset == p.offset && last.len == p.len) {
        l.parts.back().push_back(p.node);
      } else if (p.offset >= last.offset + last.len) {
        l.windows.push_back(p);
        l.parts.push_back({p.node});
      } else {
        continue;
      }
      placed = true;
      break;
    }
    if (!placed) layers.push_back({{p}, {{p.node}}});
  }
  return layers;
}

}  // namespace

ir::Graph accumulate_slice_grads(const ir::Graph& g) {
  const size_t n = g.nodes.size();
  std::vector<int> uses(n, 0);
  for (const GNode& node : g.nodes)
    for (int in : node.inputs) ++uses[static_cast<size_t>(in)];
  for (int r : g.results) ++uses[static_cast<size_t>(r)];
  // a sum: adds of same-shape, same-dtype operands; an inner add is read only by its sum
  auto same_add = [&](size_t i) {
    const GNode& a = g.nodes[i];
    return a.op == OpKind::Add && std::all_of(a.inputs.begin(), a.inputs.end(), [&](int x) {
             const GNode& in = g.nodes[static_cast<size_t>(x)];
             return in.shape == a.shape && in.dtype == a.dtype;
           });
  };
  std::vector<char> inner(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (same_add(i))
      for (int x : g.nodes[i].inputs)
        if (same_add(static_cast<size_t>(x)) && uses[static_cast<size_t>(x)] == 1)
          inner[static_cast<size_t>(x)] = 1;

  std::vector<int> pos(n, -1);  // each node's index in the new graph
  size_t i = 0;
  return rebuild(g, [&](ir::Graph& out, const GNode& node) {
    const size_t at = i++;
    pos[at] = static_cast<int>(out.nodes.size());  // where it goes if kept
    if (inner[at] || !same_add(at)) return -1;
    // the sum's terms, and the scatters among them by dim
    std::vector<int> terms, todo{static_cast<int>(at)};
    std::map<int, std::vector<Scatter>> scatters;
    while (!todo.empty()) {
      const int x = todo.back();
      todo.pop_back();
      if (x == static_cast<int>(at) || inner[static_cast<size_t>(x)]) {
        for (int y : g.nodes[static_cast<size_t>(x)].inputs) todo.push_back(y);
        continue;
      }
      Scatter s;
      if (scatter_of(g, x, s))
        scatters[concat_dim(g.nodes[static_cast<size_t>(x)])].push_back(std::move(s));
      else
        terms.push_back(pos[static_cast<size_t>(x)]);
    }
    auto emit = [&](OpKind op, Shape shape, std::vector<int> inputs) {
      // made in place: a moved temporary trips gcc's -Wmaybe-uninitialized under TSan
      GNode& e = out.nodes.emplace_back();
      e.op = op;
      e.dtype = node.dtype;
      e.shape = std::move(shape);
      e.inputs = std::move(inputs);
      return static_cast<int>(out.nodes.size()) - 1;
    };
    bool merged = false;
    int zero = -1;
    for (auto& entry : scatters) {
      const int dim = entry.first;
      std::vector<Scatter>& group = entry.second;
      const std::vector<Layer> layers = layers_of(group);
      if (layers.size() >= group.size()) {  // nothing to merge
        for (const Scatter& s : group) terms.push_back(pos[static_cast<size_t>(s.leaf)]);
        continue;
      }
      merged = true;
      zero = pos[static_cast<size_t>(group[0].zero)];
      for (const Layer& layer : layers) {
        std::vector<int> cat;
        auto zeros = [&](int64_t len) {
          Shape s = node.shape;
          s[dim] = len;
          cat.push_back(emit(OpKind::BroadcastTo, s, {zero}));
        };
        int64_t cursor = 0;
        for (size_t w = 0; w < layer.windows.size(); ++w) {
          const Piece& win = layer.windows[w];
          if (win.offset > cursor) zeros(win.offset - cursor);
          int acc = pos[static_cast<size_t>(layer.parts[w][0])];
          for (size_t k = 1; k < layer.parts[w].size(); ++k)
            acc = emit(OpKind::Add, out.nodes[static_cast<size_t>(acc)].shape,
                       {acc, pos[static_cast<size_t>(layer.parts[w][k])]});
          cat.push_back(acc);
          cursor = win.offset + win.len;
        }
        if (cursor < node.shape[dim]) zeros(node.shape[dim] - cursor);
        terms.push_back(emit(OpKind::Concat, node.shape, std::move(cat)));
        out.nodes.back().attrs.push(dim);
      }
    }
    if (!merged) return -1;
    // every term a concat of zeros only (the gradient of slices nothing reads): zeros
    if (terms.empty()) terms.push_back(emit(OpKind::BroadcastTo, node.shape, {zero}));
    int acc = terms[0];
    for (size_t k = 1; k < terms.size(); ++k) acc = emit(OpKind::Add, node.shape, {acc, terms[k]});
    pos[at] = acc;
    return acc;
  });
}

}  // namespace lazytrace::compiler
