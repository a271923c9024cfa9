"""nn.Module's API as torch's: Sequential and ModuleList editing (slices, insert, del,
renumbering), the name checks of register_buffer / register_parameter / add_module,
zero_grad(set_to_none=False), and load_state_dict of a value that is not a tensor."""

from collections import OrderedDict

import numpy as np
import pytest

import lazytrace as lt
from lazytrace import nn


def _keys(m):
    return list(m.state_dict())


def test_sequential_slice_is_a_sequential_that_keeps_names():
    a, r, b = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    s = nn.Sequential(a, r, b)
    head = s[0:2]
    assert type(head) is nn.Sequential and list(head._modules) == ["0", "1"]
    assert head[0] is a and head[1] is r
    x = lt.randn(4, 2)
    np.testing.assert_allclose(head(x).detach().numpy(), lt.relu(a(x)).detach().numpy())
    assert list(s[1:]._modules) == ["1", "2"] and _keys(s[1:]) == ["2.weight", "2.bias"]
    named = nn.Sequential(OrderedDict(fc=a, act=r, out=b))
    assert list(named[1:]._modules) == ["act", "out"]
    assert s[-1] is b and s[-3] is a
    with pytest.raises(IndexError, match=r"\[Sequential.__getitem__\] index 3 is out of range"):
        s[3]
    with pytest.raises(IndexError, match="out of range"):
        s[-4]


def test_sequential_append_insert_extend_set_del_add():
    a, b, c, d = nn.Linear(1, 2), nn.Linear(2, 3), nn.Tanh(), nn.ReLU()
    s = nn.Sequential(a, b)
    assert s.append(c) is s and list(s) == [a, b, c] and len(s) == 3
    assert s.insert(0, d) is s and list(s) == [d, a, b, c]
    assert list(s._modules) == ["0", "1", "2", "3"]
    assert _keys(s) == ["1.weight", "1.bias", "2.weight", "2.bias"]
    s.insert(-1, nn.Identity())  # before the last, as list.insert
    assert [type(m).__name__ for m in s] == ["ReLU", "Linear", "Linear", "Identity", "Tanh"]
    with pytest.raises(IndexError, match="out of range"):
        s.insert(9, d)
    s.extend([d])
    assert len(s) == 6 and s[5] is d
    s[0] = c
    assert s[0] is c and s.get_submodule("0") is c
    del s[0]  # the rest renumbered "0", "1", ...
    assert list(s._modules) == ["0", "1", "2", "3", "4"] and s[0] is a
    assert _keys(s) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert s.__dict__["0"] is a and "4" in s.__dict__ and "5" not in s.__dict__
    del s[-3:]
    assert list(s) == [a, b]
    x = lt.randn(3, 1)
    np.testing.assert_allclose(s(x).detach().numpy(), b(a(x)).detach().numpy())
    both = s + nn.Sequential(c)
    assert type(both) is nn.Sequential and list(both) == [a, b, c] and len(s) == 2
    with pytest.raises(ValueError, match=r"\[Sequential.__add__\]"):
        s + [c]
    with pytest.raises(IndexError, match="out of range"):
        s[2] = c


def test_module_list_insert_del_iadd_set_add_keep_numbering():
    layers = [nn.Linear(1, 1) for _ in range(4)]
    ml = nn.ModuleList(layers[:3])
    ml.insert(0, layers[3])
    assert list(ml) == [layers[3], layers[0], layers[1], layers[2]]
    assert list(ml._modules) == ["0", "1", "2", "3"]
    del ml[0]
    assert list(ml) == layers[:3] and list(ml._modules) == ["0", "1", "2"]
    del ml[::2]
    assert list(ml) == [layers[1]] and list(ml._modules) == ["0"]
    assert _keys(ml) == ["0.weight", "0.bias"] and "1" not in ml.__dict__
    ml += [layers[0], nn.ReLU()]
    assert len(ml) == 3 and ml[1] is layers[0] and isinstance(ml[-1], nn.ReLU)
    ml[-1] = layers[2]
    assert ml[2] is layers[2]
    assert [n for n, _ in ml.named_parameters()] == [f"{i}.{w}" for i in range(3)
                                                      for w in ("weight", "bias")]
    more = ml + [layers[3]]
    assert type(more) is nn.ModuleList and list(more) == [layers[1], layers[0], layers[2], layers[3]]
    assert len(ml) == 3
    assert type(ml[1:]) is nn.ModuleList and list(ml[1:]) == [layers[0], layers[2]]
    assert ml.pop(0) is layers[1] and list(ml) == [layers[0], layers[2]]
    with pytest.raises(IndexError, match=r"\[ModuleList.__getitem__\] index 2 is out of range"):
        ml[2]
    with pytest.raises(IndexError, match="out of range"):
        del ml[-3]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(lt.ones(2))
        self.sub = nn.Linear(1, 1)
        self.register_buffer("b", lt.zeros(2))


def test_register_names_are_checked_as_torch():
    n = _Net()
    with pytest.raises(KeyError, match=r"\[Module.register_buffer\] attribute 'w' already exists"):
        n.register_buffer("w", lt.zeros(3))
    with pytest.raises(KeyError, match="attribute 'sub' already exists"):
        n.register_buffer("sub", lt.zeros(3))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        n.register_buffer("forward", lt.zeros(1))
    with pytest.raises(KeyError, match="attribute 'training' already exists"):
        n.register_parameter("training", nn.Parameter(lt.ones(1)))
    with pytest.raises(KeyError, match="attribute 'b' already exists"):
        n.register_parameter("b", nn.Parameter(lt.ones(1)))
    with pytest.raises(KeyError, match=r"\[Module.register_parameter\] parameter name cannot contain"):
        n.register_parameter("x.y", nn.Parameter(lt.ones(1)))
    with pytest.raises(KeyError, match="buffer name cannot be the empty string"):
        n.register_buffer("", lt.ones(1))
    with pytest.raises(KeyError, match=r"\[Module.add_module\] module name cannot be the empty string"):
        n.add_module("", nn.Linear(1, 1))
    with pytest.raises(KeyError, match="attribute 'w' already exists"):
        n.add_module("w", nn.Linear(1, 1))
    with pytest.raises(KeyError, match="module name cannot contain"):
        n.register_module("a.b", nn.Linear(1, 1))
    with pytest.raises(TypeError, match="buffer name should be a string"):
        n.register_buffer(3, lt.ones(1))
    # nothing changed by the refused calls
    assert _keys(n) == ["w", "b", "sub.weight", "sub.bias"]
    assert isinstance(n.sub, nn.Linear) and n.w.tolist() == [1.0, 1.0]
    # registering again over the same kind replaces, and setattr still moves a name
    n.register_buffer("b", lt.full((1,), 7.0))
    n.register_parameter("w", None)
    n.add_module("sub", nn.Tanh())
    assert n.b.tolist() == [7.0] and n.w is None and isinstance(n.sub, nn.Tanh)
    n.w = nn.Buffer(lt.ones(1))
    assert "w" in n._buffers and "w" not in n._parameters
    # a ModuleDict key may be named like a method: only ever read as d[key]
    d = nn.ModuleDict({"items": nn.Linear(1, 1)})
    assert d["items"].out_features == 1 and callable(d.items)


def test_zero_grad_set_to_none_false_zeroes_existing_grads():
    m = nn.Linear(2, 1)
    m(lt.ones(3, 2)).sum().backward()
    assert m.weight.grad.tolist() == [[3.0, 3.0]]
    m.zero_grad(set_to_none=False)
    assert m.weight.grad.tolist() == [[0.0, 0.0]] and m.bias.grad.tolist() == [0.0]
    assert m.weight.grad.dtype == lt.float32
    m.weight.grad = None
    m.zero_grad(set_to_none=False)
    assert m.weight.grad is None and m.bias.grad.tolist() == [0.0]
    m.zero_grad()
    assert m.bias.grad is None


def test_load_state_dict_of_a_non_tensor_names_the_key():
    m = nn.Linear(1, 2)
    before = m.weight.tolist()
    sd = dict(m.state_dict())
    sd["weight"] = lt.zeros(2, 1)
    sd["bias"] = [7.0, 6.0]
    with pytest.raises(RuntimeError, match=r"\[Module.load_state_dict\].*parameter named \"bias\""
                                           r".*received <class 'list'>"):
        m.load_state_dict(sd)
    assert m.weight.tolist() == before  # checked before anything is copied
    m.load_state_dict({"weight": np.array([[2.0], [3.0]]), "bias": np.array([4.0, 5.0])})
    assert m.weight.tolist() == [[2.0], [3.0]] and m.bias.tolist() == [4.0, 5.0]


class _Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = self.a  # one submodule under two names


def test_a_shared_submodule_has_every_name_in_the_state_dict_as_torch():
    m = _Shared()
    names = ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert list(m.state_dict()) == names
    assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == names
    assert [n for n, _ in m.named_parameters()] == names[:2]
    keys = m.load_state_dict({k: lt.ones(2, 2) if k.endswith("weight") else lt.zeros(2)
                              for k in names})
    assert keys.missing_keys == [] and keys.unexpected_keys == []
    assert m.b.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_load_state_dict_with_assign_takes_the_tensors_dtype():
    lin = nn.Linear(2, 2)
    sd = {k: v.to(lt.float64) for k, v in lin.state_dict().items()}
    other = nn.Linear(2, 2)
    other.load_state_dict(sd, assign=True)
    assert other.weight.dtype == lt.float64 and isinstance(other.weight, nn.Parameter)
    assert other.weight.requires_grad and [n for n, _ in other.named_parameters()] == ["weight", "bias"]
    np.testing.assert_array_equal(other.weight.detach().numpy(), sd["weight"].numpy())
    other.load_state_dict(lin.state_dict())  # without assign: copied into float64 parameters
    assert other.weight.dtype == lt.float64


def test_load_state_dict_with_assign_is_seen_by_a_compiled_function():
    m = nn.Linear(2, 1, bias=False)
    f = lt.compile(lambda x: m(x))
    x = lt.ones(1, 2)
    f(x)
    m.load_state_dict({"weight": lt.tensor([[20.0, 20.0]])}, assign=True)
    assert f(x).tolist() == m(x).tolist() == [[40.0]]
