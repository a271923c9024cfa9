"""Tensors: creation, ops against NumPy, weak typing, indexing, in-place, host memory."""

import math

import numpy as np
import pytest

import lazytrace as lt

RNG = np.random.default_rng(0)


def test_creation_argument_forms():
    assert lt.zeros(2, 3).shape == (2, 3)
    assert lt.zeros((2, 3)).shape == (2, 3)
    assert lt.ones([4]).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert lt.zeros(2, dtype=lt.int64).dtype == lt.int64
    assert lt.full((2, 2), 7).dtype == lt.int64 and lt.full((2, 2), 7).tolist() == [[7, 7], [7, 7]]
    assert lt.full((2,), 1.5).dtype == lt.float32
    assert lt.arange(5).tolist() == [0, 1, 2, 3, 4] and lt.arange(5).dtype == lt.int64
    assert lt.arange(1, 6, dtype=lt.float32).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    np.testing.assert_allclose(lt.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert lt.zeros(2, 3, device="cpu").shape == (2, 3)
    t = lt.zeros_like(lt.ones(3, dtype=lt.float64))
    assert t.dtype == lt.float64 and t.tolist() == [0.0, 0.0, 0.0]


def test_tensor_dtype_inference_as_torch():
    assert lt.tensor(3).shape == () and lt.tensor(3).dtype == lt.int64
    assert lt.tensor(2.5).dtype == lt.float32
    assert lt.tensor([True, False]).dtype == lt.bool
    assert lt.tensor([1, 2.5]).dtype == lt.float32
    assert lt.tensor(np.ones(3, dtype=np.float64)).dtype == lt.float64
    assert lt.tensor([[1, 2], [3, 4]], dtype=lt.float16).dtype == lt.float16
    b = lt.tensor([1.5, -2.25], dtype=lt.bfloat16)
    assert b.dtype == lt.bfloat16 and b.float().tolist() == [1.5, -2.25]


def test_other_devices_are_a_value_error_naming_cpu():
    with pytest.raises(ValueError, match="'cpu'"):
        lt.zeros(2, device="xla")
    with pytest.raises(ValueError, match="cpu"):
        lt.ones(2).to("cuda")


UNARY = {
    "exp": np.exp, "log": np.log, "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)), "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "abs": np.abs, "neg": np.negative,
    "erf": np.vectorize(math.erf),
    "gelu": np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2)))),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [lt.float32, lt.float64])
def test_unary_ops_match_numpy_as_functions_and_methods(name, dtype):
    x = RNG.uniform(0.1, 3.0, size=(3, 5))
    t = lt.tensor(x, dtype=dtype)
    want = UNARY[name](x)
    rtol = 1e-6 if dtype == lt.float32 else 1e-13
    np.testing.assert_allclose(getattr(lt, name)(t).numpy(), want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(getattr(t, name)().numpy(), want, rtol=rtol, atol=rtol)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power, "atan2": np.arctan2,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_broadcast_as_numpy(name):
    a = RNG.uniform(0.5, 2.0, size=(4, 1, 3))
    b = RNG.uniform(0.5, 2.0, size=(5, 1))
    got = getattr(lt, name)(lt.tensor(a, dtype=lt.float64), lt.tensor(b, dtype=lt.float64))
    np.testing.assert_allclose(got.numpy(), BINARY[name](a, b), rtol=1e-13)


def test_operators_with_python_numbers_on_either_side():
    x = np.array([1.0, 2.0, 4.0])
    t = lt.tensor(x)
    for got, want in [
        (t + 1, x + 1), (1 + t, 1 + x), (t - 2.5, x - 2.5), (3 - t, 3 - x), (t * 2, x * 2),
        (t / 4, x / 4), (8 / t, 8 / x), (t ** 2, x ** 2), (2 ** t, 2 ** x), (-t, -x),
        (t // 1.5, x // 1.5), (t % 1.5, x % 1.5), (abs(-t), x),
    ]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert (t > 1.5).tolist() == [False, True, True]
    assert (t == 2).tolist() == [False, True, False]
    assert (t @ t).item() == pytest.approx(21.0)


def test_python_numbers_take_the_tensors_dtype_weak_typing():
    assert (lt.ones(2, dtype=lt.float16) + 1.0).dtype == lt.float16
    assert (2.0 * lt.ones(2, dtype=lt.bfloat16)).dtype == lt.bfloat16
    assert (lt.ones(2, dtype=lt.float64) + 1).dtype == lt.float64
    assert (lt.ones(2, dtype=lt.int32) + 1).dtype == lt.int32
    assert (lt.ones(2, dtype=lt.int64) + 1.5).dtype == lt.float32
    assert (lt.ones(2, dtype=lt.int64) / 2).dtype == lt.float32
    assert lt.add(lt.ones(2, dtype=lt.float16), 1.0).dtype == lt.float16


def test_integer_floor_division_and_remainder_follow_python():
    a = np.array([7, -7, 7, -7, 0, 9])
    b = np.array([2, 2, -2, -2, 3, 4])
    ta, tb = lt.tensor(a), lt.tensor(b)
    assert (ta // tb).tolist() == (a // b).tolist()
    assert (ta % tb).tolist() == (a % b).tolist()
    assert (ta // tb).dtype == lt.int64
    x = np.array([-3.5, -0.5, 0.5, 2.5, 3.7])
    np.testing.assert_array_equal(lt.floor(lt.tensor(x, dtype=lt.float64)).numpy(), np.floor(x))
    np.testing.assert_array_equal(lt.round(lt.tensor(x, dtype=lt.float64)).numpy(), np.round(x))


def test_reductions_match_numpy():
    x = RNG.normal(size=(3, 4, 5))
    t = lt.tensor(x, dtype=lt.float64)
    np.testing.assert_allclose(t.sum().item(), x.sum(), rtol=1e-12)
    np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-12)
    np.testing.assert_allclose(t.mean((0, 2), keepdim=True).numpy(), x.mean((0, 2), keepdims=True),
                               rtol=1e-12)
    np.testing.assert_allclose(t.amax(-1).numpy(), x.max(-1))
    np.testing.assert_allclose(t.amin(0).numpy(), x.min(0))
    values, indices = t.max(1)
    np.testing.assert_allclose(values.numpy(), x.max(1))
    assert indices.tolist() == x.argmax(1).tolist()
    assert t.min(2).indices.tolist() == x.argmin(2).tolist()
    assert t.argmax().item() == x.argmax()
    np.testing.assert_allclose(t.var(1).numpy(), x.var(1, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(t.std().item(), x.std(ddof=1), rtol=1e-12)
    np.testing.assert_allclose(lt.softmax(t, -1).numpy(),
                               np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(t.log_softmax(1).numpy(),
                               x - np.log(np.exp(x).sum(1, keepdims=True)), rtol=1e-12)


def test_layout_ops_match_numpy():
    x = np.arange(24.0).reshape(2, 3, 4)
    t = lt.tensor(x)
    np.testing.assert_array_equal(t.reshape(4, 6).numpy(), x.reshape(4, 6))
    np.testing.assert_array_equal(t.view(-1).numpy(), x.reshape(-1))
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), x.transpose(2, 1, 0))
    np.testing.assert_array_equal(t.permute(1, 2, 0).numpy(), x.transpose(1, 2, 0))
    np.testing.assert_array_equal(t.permute((2, 0, 1)).numpy(), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.unsqueeze(1).numpy(), x[:, None])
    np.testing.assert_array_equal(t[:, :1].squeeze().numpy(), x[:, 0])
    np.testing.assert_array_equal(t.flatten(1).numpy(), x.reshape(2, 12))
    np.testing.assert_array_equal(t[:, :1].expand(2, 5, 4).numpy(), np.broadcast_to(x[:, :1], (2, 5, 4)))
    np.testing.assert_array_equal(t[:, :1].expand(-1, 3, -1).numpy(), np.broadcast_to(x[:, :1], (2, 3, 4)))
    np.testing.assert_array_equal(lt.cat([t, t], 1).numpy(), np.concatenate([x, x], 1))
    np.testing.assert_array_equal(lt.stack([t, t], -1).numpy(), np.stack([x, x], -1))
    np.testing.assert_array_equal(t.T.numpy(), x.T)
    np.testing.assert_array_equal(lt.where(t > 10, t, -1.0).numpy(), np.where(x > 10, x, -1.0))


@pytest.mark.parametrize(
    "index",
    [
        1, -1, (0, 2), (slice(None), 1), slice(1, None), (Ellipsis, 2), (Ellipsis, None),
        (None, 1), (slice(None, None, 2),), (slice(None), slice(0, 4, 3)),
        (1, Ellipsis, slice(1, 3)), (slice(-2, None), -3), (slice(5, 2),),
    ],
)
def test_indexing_matches_numpy(index):
    x = np.arange(60.0).reshape(3, 4, 5)
    np.testing.assert_array_equal(lt.tensor(x)[index].numpy(), x[index])


def test_integer_tensor_indices_match_numpy():
    x = np.arange(60.0).reshape(3, 4, 5)
    t = lt.tensor(x)
    idx = np.array([3, 0, -1, 0])
    np.testing.assert_array_equal(t[:, lt.tensor(idx)].numpy(), x[:, idx])
    np.testing.assert_array_equal(t[lt.tensor([[0, 2], [1, 1]])].numpy(), x[np.array([[0, 2], [1, 1]])])
    np.testing.assert_array_equal(t[..., [4, 0]].numpy(), x[..., [4, 0]])


def test_bad_indices_raise_index_errors():
    t = lt.zeros(3, 4)
    with pytest.raises(IndexError, match="out of range"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="mask"):
        t[t > 0]
    with pytest.raises(ValueError, match="step"):
        t[::-1]


def test_setitem_every_holder_sees_it():
    x = np.arange(12.0).reshape(3, 4)
    t = lt.tensor(x)
    alias = t
    held = [t]
    t[1] = 0.0
    t[:, 2] = lt.tensor([7.0, 8.0, 9.0])
    x[1] = 0.0
    x[:, 2] = [7.0, 8.0, 9.0]
    np.testing.assert_array_equal(alias.numpy(), x)
    np.testing.assert_array_equal(held[0].numpy(), x)


def test_in_place_ops_have_torch_semantics():
    t = lt.tensor([1.0, 2.0])
    holders = {"w": t}
    t += 1
    assert holders["w"].tolist() == [2.0, 3.0]
    t *= lt.tensor([2.0, 0.5])
    t -= 1.0
    t /= 2
    assert holders["w"].tolist() == [1.5, 0.25]
    t.add_(1).mul_(2)
    assert holders["w"].tolist() == [5.0, 2.5]
    assert t.copy_(lt.tensor([9, 8])).tolist() == [9.0, 8.0] and t.dtype == lt.float32
    t.zero_()
    assert holders["w"].tolist() == [0.0, 0.0]
    i = lt.tensor([1, 2], dtype=lt.int32)
    i += 1
    assert i.dtype == lt.int32 and i.tolist() == [2, 3]
    with pytest.raises(ValueError, match="shape"):
        t += lt.ones(3, 2)


def test_repr_shows_values():
    assert repr(lt.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(lt.tensor([1, 2])) == "tensor([1, 2])"
    assert "dtype=lazytrace.float64" in repr(lt.tensor([1.0], dtype=lt.float64))
    assert "requires_grad=True" in repr(lt.tensor([1.0], requires_grad=True))
    assert repr(lt.float16) == "lazytrace.float16"


def test_reading_values():
    t = lt.tensor([[1.5, 2.0], [3.0, 4.0]])
    assert t[0, 0].item() == 1.5 and isinstance(t[0, 0].item(), float)
    assert lt.tensor(3).item() == 3 and isinstance(lt.tensor(3).item(), int)
    assert lt.tensor(True).item() is True
    assert float(t[1, 1]) == 4.0 and int(t[1, 0]) == 3 and bool(t[0, 0])
    assert t.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    assert np.asarray(t).dtype == np.float32 and np.asarray(t).tolist() == t.tolist()
    assert len(t) == 2 and t.numel() == 4 and t.ndim == 2 and t.size() == (2, 2) and t.size(-1) == 2
    with pytest.raises(ValueError, match="item"):
        t.item()
    with pytest.raises(RuntimeError, match="detach"):
        lt.ones(2, requires_grad=True).numpy()
    assert lt.ones(2, requires_grad=True).detach().numpy().tolist() == [1.0, 1.0]


def test_numpy_is_a_copy():
    t = lt.tensor([1.0, 2.0])
    a = t.numpy()
    a[0] = 100.0
    assert t.tolist() == [1.0, 2.0]


def test_dlpack_out_shares_memory():
    t = lt.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3)) * 2
    a, b = np.from_dlpack(t), np.from_dlpack(t)
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3) * 2)
    assert t.__dlpack_device__() == (1, 0)
    del t
    np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3) * 2)  # the memory is kept


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_])
def test_dlpack_in_is_zero_copy_for_contiguous_arrays(np_dtype):
    a = (np.arange(12) % 3).astype(np_dtype).reshape(3, 4)
    t = lt.from_dlpack(a)
    assert t.shape == (3, 4)
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    # shared, as torch.from_numpy: a change to the array before the tensor is read shows
    if np_dtype is not np.bool_:
        a[0, 0] = 2
        assert np.from_dlpack(lt.from_numpy(a) + 0)[0, 0] == 2


def test_from_numpy_strided_arrays_are_copied_correctly():
    a = np.arange(24.0).reshape(4, 6)[::2, 1::2]
    np.testing.assert_array_equal(lt.from_numpy(a).numpy(), a)
    np.testing.assert_array_equal(lt.from_dlpack(a.T).numpy(), a.T)


def test_results_of_a_zero_copy_input_never_write_into_it():
    a = np.ones(1024, dtype=np.float32)
    t = lt.from_numpy(a)
    del_me = t * 3.0  # an elementwise result the backend could write into its input
    lt.sync([del_me])
    assert (a == 1.0).all()
    np.testing.assert_array_equal(del_me.numpy(), np.full(1024, 3.0))


def test_random_numbers():
    lt.manual_seed(3)
    a = lt.randn(1000)
    b = lt.rand(1000)
    lt.manual_seed(3)
    assert lt.randn(1000).tolist() == a.tolist()
    x = a.numpy()
    assert abs(x.mean()) < 0.15 and abs(x.std() - 1) < 0.1
    u = b.numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.05


def test_torch_dlpack_both_ways():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (make bench-python installs it)")
    t = lt.arange(6, dtype=lt.float32).reshape(2, 3) * 2
    assert torch.from_dlpack(t).tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    back = lt.from_dlpack(torch.arange(4, dtype=torch.float64) + 1)
    assert back.dtype == lt.float64 and back.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert lt.from_dlpack(torch.ones(2, 3).t()).shape == (3, 2)


def test_view_expand_contiguous_are_functions_too():
    x = lt.arange(6.0)
    np.testing.assert_array_equal(lt.view(x, 2, 3).numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(lt.expand(lt.tensor([[1.0], [2.0]]), 2, 3).numpy(),
                                  np.broadcast_to([[1.0], [2.0]], (2, 3)))
    assert lt.contiguous(x).tolist() == x.tolist()


def test_squeeze_of_a_dim_out_of_range_raises():
    t = lt.ones(2, 1, 3)
    assert t.squeeze(1).shape == (2, 3) and t.squeeze(-2).shape == (2, 3)
    assert t.squeeze(0).shape == (2, 1, 3)  # size 2: unchanged, as torch
    with pytest.raises(ValueError, match=r"\[squeeze\] dim 7 is out of range.*\[-3, 2\]"):
        t.squeeze(7)
    with pytest.raises(ValueError, match=r"\[squeeze\] dim -4"):
        lt.squeeze(t, (0, -4))


def test_messages_give_python_advice_not_cpp():
    """The C++ library's advice in Python's words: t.to(lt.float32), lt.no_grad(),
    retain_graph=True, and no "lt::" anywhere."""
    with pytest.raises(ValueError) as e:
        lt.tensor([1, 2]).mean()
    assert "t.to(lt.float32)" in str(e.value) and "lt::" not in str(e.value)
    x = lt.ones(2, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError) as e:
        y.backward()
    assert "retain_graph=True" in str(e.value) and "lt::" not in str(e.value)
    p = lt.nn.Parameter(lt.ones(2))
    with pytest.raises(Exception) as e:
        p.copy_(lt.zeros(2))
    assert "lt.no_grad()" in str(e.value) and "lt::" not in str(e.value)


def test_floor_divide_and_remainder_match_python_and_numpy():
    """// and % as Python and NumPy compute them: exact int64 beyond 2**53, float rounding
    edges in float32 and float64, divisors of both signs; gradients of %."""
    a = np.array([2**62 + 7, -(2**55) - 3, 2**53 + 1, 7, -7, 7, -7], dtype=np.int64)
    b = np.array([3, 3, 3, 2, 2, -2, -2], dtype=np.int64)
    np.testing.assert_array_equal((lt.tensor(a) // lt.tensor(b)).numpy(), a // b)
    np.testing.assert_array_equal((lt.tensor(a) % lt.tensor(b)).numpy(), a % b)
    assert (lt.tensor([2**62 + 7]) % 3).item() == (2**62 + 7) % 3
    for dt in (np.float32, np.float64):
        x = np.array([7.0, -5.3, 10000001.0, -7.5, 7.5], dtype=dt)
        y = np.array([0.1, 0.1, -2.5, 2.0, -2.0], dtype=dt)
        np.testing.assert_array_equal((lt.tensor(x) // lt.tensor(y)).numpy(), x // y)
        np.testing.assert_allclose((lt.tensor(x) % lt.tensor(y)).numpy(), x % y, rtol=1e-6)
    np.testing.assert_array_equal((7 // lt.tensor([2, -2])).numpy(), [3, -4])
    np.testing.assert_allclose((lt.tensor([7, -7]) % 2.5).numpy(), [2.0, 0.5])
    p = lt.tensor([5.0, -3.5], requires_grad=True)
    d = lt.tensor([2.0, 1.5], requires_grad=True)
    (p % d).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(d.grad.numpy(), [-2.0, 3.0])
