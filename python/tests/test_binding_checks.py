"""Mistakes caught where Python values enter the C++ library: nested trees, numbers that do
not fit the tensor's dtype, NUL characters, dims that are not ints, and backward() inside a
pure function. Each was a crash, a silent wrong value, or a raw C++ message."""

import math

import numpy as np
import pytest
import safetensors.numpy

import lazytrace as lt


def test_a_tree_that_contains_itself_is_an_error_not_a_crash():
    a = [lt.ones(1)]
    a.append(a)
    with pytest.raises(ValueError, match=r"\[tree_flatten\] tree nests containers more than "
                                         r"1000 deep"):
        lt.tree_flatten(a)
    deep = lt.ones(1)
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ValueError, match=r"\[scan\] init nests containers"):
        lt.scan(lambda c, x: (c, None), deep, lt.ones(2, 1))
    ok = lt.ones(1)
    for _ in range(500):  # deep, within the limit: flattened and rebuilt
        ok = {"k": ok}
    leaves, spec = lt.tree_flatten(ok)
    assert len(leaves) == 1 and lt.tree_unflatten(spec, leaves).keys() == {"k"}


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 3e9, -3e9, 1e20])
def test_a_float_that_does_not_fit_an_int32_tensor_is_an_error(value):
    with pytest.raises(ValueError, match=r"\[full\] the number .* cannot be converted to int32 "
                                         r"without overflow"):
        lt.full((2,), value, dtype=lt.int32)
    t = lt.zeros(3, dtype=lt.int32)
    with pytest.raises(ValueError, match=r"cannot be converted to int32 without overflow"):
        t.masked_fill(lt.tensor([True, False, True]), value)


def test_a_float_that_fits_is_truncated_as_torch():
    np.testing.assert_array_equal(lt.full((2,), -2.7, dtype=lt.int32).numpy(), [-2, -2])
    np.testing.assert_array_equal(lt.full((1,), 2.0**62, dtype=lt.int64).numpy(), [2**62])
    with pytest.raises(ValueError, match=r"cannot be converted to int64 without overflow"):
        lt.full((1,), 2.0**63, dtype=lt.int64)


def test_nul_in_a_path_is_an_error_and_in_a_name_a_name(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    with pytest.raises(ValueError, match=r"\[safetensors\] the path .* holds a NUL character"):
        lt.save_file({"w": lt.ones(2)}, str(victim) + "\0evil.st")
    assert victim.read_bytes() == b"keep"
    with pytest.raises(ValueError, match=r"holds a NUL character"):
        lt.load_file(str(victim) + "\0x")
    path = str(tmp_path / "names.safetensors")
    safetensors.numpy.save_file({"w\0a": np.ones(2, np.float32),
                                 "w\0b": np.zeros(3, np.float32)}, path)
    loaded = lt.load_file(path)
    assert sorted(loaded) == ["w\0a", "w\0b"]
    np.testing.assert_array_equal(loaded["w\0b"].numpy(), np.zeros(3, np.float32))


def test_loading_a_missing_file_is_file_not_found(tmp_path):
    for load in (lt.load_file, lt.load_metadata):
        with pytest.raises(FileNotFoundError, match=r"no such file"):
            load(tmp_path / "missing.safetensors")


def test_dims_that_are_not_ints_are_type_errors():
    x = lt.ones(2, 3)
    with pytest.raises(TypeError, match=r"\[sum\].*must be an int.*float"):
        x.sum(0.5)
    with pytest.raises(TypeError, match=r"\[permute\].*must be an int.*float"):
        x.permute(1.0, 0)
    with pytest.raises(ValueError, match=r"\[sum\] dim 1099511627776 is out of range"):
        x.sum(2**40)
    np.testing.assert_array_equal(x.sum((0, 1)).numpy(), 6.0)


def test_numpy_of_more_than_64_dims_is_an_error_not_an_abort():
    t = lt.ones(*([1] * 65))
    with pytest.raises(ValueError, match=r"\[numpy\] NumPy arrays have at most 64 dims"):
        t._host()


def test_backward_inside_a_pure_function_is_an_error():
    w = lt.ones(2, requires_grad=True)

    def step(x):
        (w * x).sum().backward()
        return x * 1

    with pytest.raises(RuntimeError, match=r"\[assume_pure\] backward\(\) inside the traced "
                                           r"function reaches a tensor from outside it"):
        lt.assume_pure(step)(lt.tensor([3.0, 4.0]))
    assert w.grad is None

    def body(c, x):
        (w * x).sum().backward()
        return c, None

    with pytest.raises(RuntimeError, match=r"\[scan\] backward\(\) inside the traced function"):
        lt.scan(body, lt.zeros(2), lt.ones(3, 2))

    def local(x):  # leaves made inside: pure, allowed
        y = x.detach().requires_grad_()
        (y * y).sum().backward()
        return y.grad

    np.testing.assert_array_equal(lt.assume_pure(local)(lt.tensor([1.0, 2.0])).numpy(),
                                  [2.0, 4.0])


def test_a_python_int_past_int64_names_the_number():
    with pytest.raises(ValueError, match=r"\[number\] the integer 1180591620717411303424 does "
                                         r"not fit in int64"):
        lt.ones(2) + 2**70
