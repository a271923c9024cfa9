"""tree_map and tree_leaves over lazytrace pytrees (tree_flatten is in the extension)."""

from ._lazytrace import tree_flatten, tree_unflatten


def tree_leaves(tree):
    return tree_flatten(tree)[0]


def tree_map(fn, tree, *rest):
    """The tree with fn applied to each Tensor leaf (and the matching leaves of `rest`)."""
    leaves, spec = tree_flatten(tree)
    others = [tree_flatten(r) for r in rest]
    for i, (ls, s) in enumerate(others):
        if s != spec:
            raise ValueError(f"tree_map: tree {i + 1} has structure {s}, expected {spec}")
    return tree_unflatten(spec, [fn(x, *(o[0][k] for o in others)) for k, x in enumerate(leaves)])
