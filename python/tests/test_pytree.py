"""Pytrees: tuples, lists, dicts in insertion order, None, namedtuples; static values."""

import collections

import pytest

import lazytrace as lt

Point = collections.namedtuple("Point", ["x", "y"])


def test_flatten_unflatten_round_trip_keeps_structure_and_order():
    a, b, c = lt.tensor([1.0]), lt.tensor([2.0]), lt.tensor([3.0])
    tree = {"z": a, "a": [b, None, (c, 3, "s")], "p": Point(a, 2.5)}
    leaves, spec = lt.tree_flatten(tree)
    assert [t.item() for t in leaves] == [1.0, 2.0, 3.0, 1.0]  # dicts in insertion order
    assert spec.num_leaves == 4
    back = lt.tree_unflatten(spec, leaves)
    assert list(back) == ["z", "a", "p"]
    assert back["a"][1] is None and back["a"][2][1:] == (3, "s")
    assert isinstance(back["p"], Point) and back["p"].y == 2.5
    assert back["z"].item() == 1.0
    assert "Point" in repr(spec)


def test_equal_structures_have_equal_specs():
    _, s1 = lt.tree_flatten({"a": lt.ones(1), "b": (lt.ones(2), 1)})
    _, s2 = lt.tree_flatten({"a": lt.zeros(3), "b": (lt.zeros(1), 1)})
    _, s3 = lt.tree_flatten({"b": (lt.zeros(1), 1), "a": lt.zeros(3)})
    _, s4 = lt.tree_flatten({"a": lt.zeros(3), "b": (lt.zeros(1), 2)})
    assert s1 == s2 and s1 != s3 and s1 != s4


def test_tree_map():
    tree = {"w": lt.tensor([1.0, 2.0]), "n": [lt.tensor([3.0])], "k": 4}
    out = lt.tree_map(lambda t: t * 10, tree)
    assert out["w"].tolist() == [10.0, 20.0] and out["n"][0].tolist() == [30.0] and out["k"] == 4
    summed = lt.tree_map(lambda x, y: x + y, tree, out)
    assert summed["w"].tolist() == [11.0, 22.0]
    with pytest.raises(ValueError, match="structure"):
        lt.tree_map(lambda x, y: x, tree, {"w": lt.ones(1)})


def test_other_objects_are_type_errors_naming_their_path():
    with pytest.raises(TypeError, match=r"tree\[1\]\['w'\] is an object"):
        lt.tree_flatten([lt.ones(1), {"w": object()}])

    @lt.assume_pure
    def f(a, b):
        return a

    with pytest.raises(TypeError, match=r"args\[1\]\['w'\]"):
        f(lt.ones(1), {"w": object()})
    with pytest.raises(TypeError, match="result"):
        lt.assume_pure(lambda a: object())(lt.ones(1))
    with pytest.raises(TypeError, match="key"):
        lt.tree_flatten({(1, 2): lt.ones(1)})


def test_none_alone_is_an_empty_tree():
    leaves, spec = lt.tree_flatten(None)
    assert leaves == []
    assert lt.tree_unflatten(spec, []) is None
    assert lt.tree_map(lambda t: t * 2, None) is None
