"""Python numbers, NumPy arrays and Python's operator protocols with lazytrace tensors, as
torch and NumPy treat them."""
import numpy as np
import pytest

import lazytrace as lt


def test_integers_that_do_not_fit_an_int32_tensor_are_errors():
    a = lt.tensor([0, 1], dtype=lt.int32)
    for f in (lambda: a == 2**32, lambda: a < 2**32, lambda: a + 2**40,
              lambda: lt.full((2,), 2**40, dtype=lt.int32), lambda: a.fill_(2**33)):
        with pytest.raises(ValueError, match=r"does not fit in int32"):
            f()
    with pytest.raises(ValueError, match=r"does not fit in int32"):
        a[0] = 2**40
    assert a.tolist() == [0, 1]
    assert (a + (2**31 - 1)).tolist() == [2**31 - 1, -(2**31)]  # in range: int32 arithmetic
    assert (a.long() == 2**32).tolist() == [False, False]


def test_bitwise_operators_of_bool_tensors_take_bools_and_bool_arrays_only():
    t = lt.tensor([True, False])
    assert (t & [False, True]).tolist() == [False, False]
    assert (t | np.array([False, True])).tolist() == [True, True]
    assert (t ^ True).tolist() == [False, True]
    for bad in (2, 0.5):
        with pytest.raises(TypeError, match=r"takes bool tensors, bools or bool arrays"):
            t & bad
    for bad in (None, "x"):  # not an operand at all: Python's own message, as for t + None
        with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for &"):
            t & bad


def test_augmented_assignments_are_in_place():
    t = lt.tensor([7, -7])
    alias = t
    t //= 2
    assert t is alias and alias.tolist() == [3, -4]
    t %= 3
    assert alias.tolist() == [0, 2]
    t **= 2
    assert alias.tolist() == [0, 4]
    b = lt.tensor([True, False])
    same = b
    b |= lt.tensor([False, True])
    assert same.tolist() == [True, True]
    with pytest.raises(RuntimeError, match=r"in-place op on bool\[2\] gave i64\[2\]"):
        b += 1
    x = lt.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y **= 2  # the gradient reads y's old value
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_python_float_is_float64_and_to_takes_python_and_numpy_types():
    assert lt.tensor([0.1], dtype=float).dtype == lt.float64
    assert lt.tensor([0.1], dtype=float).item() == 0.1
    t = lt.tensor([1, 2])
    assert t.to(float).dtype == lt.float64 and t.to(np.float32).dtype == lt.float32
    assert t.to(dtype=np.float64).dtype == lt.float64


def test_format_contains_bool_any_all():
    loss = lt.tensor(0.123456)
    assert f"{loss:.3f}" == "0.123" and f"{lt.tensor(13)}" == "13"  # as torch
    m = lt.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert 3.0 in m and 5.0 not in m
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        bool(m)
    assert m.any().item() and not (m > 3).all().item()
    assert (m > 1.5).any(1).tolist() == [True, True]
    assert lt.all(m > 0, 0, keepdim=True).tolist() == [[True, True]]
    assert not lt.any(lt.zeros(0)).item()


def test_array_protocol_refuses_copy_false():
    t = lt.tensor([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(t, copy=False)


def test_matmul_with_numpy_arrays_gives_tensors():
    t = lt.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = np.array([[0.5, 0.0], [0.0, 2.0]], np.float32)
    r, left = t @ a, a @ t
    assert isinstance(r, lt.Tensor) and isinstance(left, lt.Tensor)
    np.testing.assert_array_equal(r.numpy(), t.numpy() @ a)
    np.testing.assert_array_equal(left.numpy(), a @ t.numpy())


def test_repr_of_an_empty_tensor_keeps_its_shape():
    assert repr(lt.zeros(2, 0)) == "tensor([], size=(2, 0))"
    assert repr(lt.zeros(0)) == "tensor([])"


def test_functions_over_tensors_take_array_data():
    t = lt.tensor([[1.0, 2.0]])
    np.testing.assert_array_equal(lt.cat([t, np.array([[3.0, 4.0]], np.float32)]).numpy(),
                                  [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(lt.stack([t[0], [5.0, 6.0]]).numpy(), [[1.0, 2.0], [5.0, 6.0]])
    np.testing.assert_array_equal(lt.where(t > 1, t, np.zeros((1, 2), np.float32)).numpy(),
                                  [[0.0, 2.0]])
    np.testing.assert_array_equal(lt.matmul(t, np.ones((2, 1), np.float32)).numpy(), [[3.0]])


def test_sign_has_a_zero_gradient():
    x = lt.tensor([-2.0, 0.0, 3.0, float("inf")], requires_grad=True)
    y = lt.sign(x)
    assert y.tolist() == [-1.0, 0.0, 1.0, 1.0]
    y.sum().backward()  # torch: zeros, not "does not require grad"
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 0.0]
