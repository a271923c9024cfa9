"""Op semantics as torch has them, checked against NumPy (or torch's documented values):
setitem with masks and repeated indices, out-of-range tensor indices, round, clamp, amin at
the integer minimum, masked_fill, argument checks, expm1."""

import numpy as np
import pytest

import lazytrace as lt


# ---- x[mask] = v
def test_a_row_mask_covers_the_first_dims():
    x = lt.zeros(3, 3)
    x[lt.tensor([True, False, False])] = 5.0
    want = np.zeros((3, 3), np.float32)
    want[np.array([True, False, False])] = 5.0
    np.testing.assert_array_equal(x.numpy(), want)  # row 0, not column 0


def test_a_numpy_bool_mask_works_like_a_tensor_mask():
    x = lt.arange(4.0)
    x[np.array([True, False, True, False])] = 9.0
    assert x.tolist() == [9.0, 1.0, 9.0, 3.0]


def test_mask_setitem_with_the_selected_count_of_values_assigns_in_order():
    want = np.zeros((3, 2), np.float32)
    want[np.array([True, False, True])] = [[1, 2], [3, 4]]
    for mask in (lt.tensor([True, False, True]), np.array([True, False, True])):
        x = lt.zeros(3, 2)
        x[mask] = lt.tensor([[1.0, 2.0], [3.0, 4.0]])
        np.testing.assert_array_equal(x.numpy(), want)
    x = lt.zeros(3)
    x[lt.tensor([True, False, True])] = lt.tensor([1.0, 2.0])
    assert x.tolist() == [1.0, 0.0, 2.0]
    with pytest.raises(ValueError, match=r"\[setitem\].*2 rows the mask selects"):
        x[lt.tensor([True, False, True])] = lt.tensor([1.0, 2.0, 3.0])
    with pytest.raises(IndexError, match=r"\[setitem\] the mask's shape \[2\]"):
        x[lt.tensor([True, False])] = 1.0


def test_mask_setitem_with_a_traced_mask_and_counted_values_is_a_clear_error():
    @lt.assume_pure
    def f(x, m):
        y = x.clone()
        y[m] = lt.tensor([1.0, 2.0])
        return y

    with pytest.raises(ValueError, match=r"\[setitem\].*traced function cannot read"):
        f(lt.zeros(3), lt.tensor([True, False, True]))


# ---- repeated indices: the last write wins
@pytest.mark.parametrize("host", [True, False])
def test_setitem_with_repeated_indices_writes_once_the_last_value(host):
    def idx(v):
        return v if host else lt.tensor(v)

    x = lt.zeros(5)
    x[idx([1, 1, 3])] = lt.tensor([1.0, 2.0, 3.0])
    want = np.zeros(5)
    want[[1, 1, 3]] = [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(x.numpy(), want)  # [0, 2, 0, 3, 0]

    x = lt.tensor([0.0, 1.0, 2.0])
    x[idx([2, 2])] = 7.0
    assert x.tolist() == [0.0, 1.0, 7.0]

    x = lt.tensor([0.0, 1.0, 2.0])
    x[idx([0, 0])] += 1
    n = np.array([0.0, 1.0, 2.0])
    n[[0, 0]] += 1
    np.testing.assert_array_equal(x.numpy(), n)  # [1, 1, 2]

    x = lt.zeros(2, 4)  # on a later dim, with negative duplicates of the same column
    x[:, idx([1, -3, 3, -1])] = lt.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    n = np.zeros((2, 4))
    n[:, [1, -3, 3, -1]] = [[1, 2, 3, 4], [5, 6, 7, 8]]
    np.testing.assert_array_equal(x.numpy(), n)


def test_setitem_with_many_repeated_tensor_indices_matches_numpy():
    rng = np.random.default_rng(3)
    i = rng.integers(-20, 20, size=300)
    v = rng.standard_normal(300)
    x = lt.zeros(20, dtype=lt.float64)
    x[lt.tensor(i)] = lt.tensor(v, dtype=lt.float64)
    n = np.zeros(20)
    n[i] = v
    np.testing.assert_array_equal(x.numpy(), n)


# ---- tensor indices below -size
def test_tensor_index_below_minus_size_is_out_of_range():
    a = lt.tensor([10.0, 20.0, 30.0])
    assert a[lt.tensor([-3, -1])].tolist() == [10.0, 30.0]
    with pytest.raises(ValueError, match="out of range"):
        a[lt.tensor([-4])].numpy()  # was a[2]
    with pytest.raises(IndexError, match="out of range"):
        a[[-4]]
    b = lt.zeros(3)
    with pytest.raises((ValueError, IndexError), match="out of range"):
        b[lt.tensor([-5])] = 1.0
        b.numpy()


# ---- round
def test_round_half_to_even_and_large_odd_integers():
    cases = [
        (lt.float32, np.float32, [8388609.0, 16777215.0, -8388609.0, 0.5, 1.5, 2.5, -2.5, 0.49999997]),
        (lt.float16, np.float16, [1025.0, 1027.0, -1025.0, 2.5, 3.5]),
        (lt.float64, np.float64, [2.0**52 + 1, -(2.0**52) - 1, 2.5, -3.5, 1e300]),
    ]
    for dt, npdt, values in cases:
        x = np.array(values, npdt)
        np.testing.assert_array_equal(lt.round(lt.tensor(x, dtype=dt)).numpy(), np.round(x))
    bf = lt.round(lt.tensor([255.0, 129.0, 2.5], dtype=lt.bfloat16)).float().tolist()
    assert bf == [255.0, 129.0, 2.0]  # 255 and 129 are bfloat16 integers (8 bits)
    neg = lt.round(lt.tensor([-0.4, -0.5, 0.4])).numpy()
    assert neg.tolist() == [0.0, 0.0, 0.0] and np.signbit(neg).tolist() == [True, True, False]


# ---- clamp
def test_clamp_promotes_with_its_bounds_and_has_gradient_one_at_the_bounds():
    y = lt.clamp(lt.tensor([1, 3, 5]), 2.5, 4.5)
    assert y.dtype == lt.float32 and y.tolist() == [2.5, 3.0, 4.5]
    y = lt.clamp(lt.tensor([1, 3, 5]), 2, 4)
    assert y.dtype == lt.int64 and y.tolist() == [2, 3, 4]
    x = lt.tensor([0.5, 1.0, 1.5, 2.0, 2.5], requires_grad=True)
    lt.clamp(x, 1.0, 2.0).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    x = lt.tensor([0.0, 3.0], requires_grad=True)
    x.clamp(min=0.0).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    assert lt.clamp(lt.tensor([1.0, 5.0]), 4.0, 2.0).tolist() == [2.0, 2.0]  # min > max: max
    with pytest.raises(ValueError, match=r"\[clamp\]"):
        lt.clamp(lt.ones(2))


# ---- amin / argmin at the integer minimum
@pytest.mark.parametrize("dt,npdt", [(lt.int64, np.int64), (lt.int32, np.int32)])
def test_amin_and_argmin_with_the_smallest_integer(dt, npdt):
    lo = np.iinfo(npdt).min
    a = np.array([[5, lo, 0], [lo + 1, 3, lo]], npdt)
    x = lt.tensor(a, dtype=dt)
    assert lt.amin(x).item() == lo and x.min().item() == lo
    np.testing.assert_array_equal(lt.amin(x, 1).numpy(), a.min(1))
    np.testing.assert_array_equal(lt.argmin(x, 1).numpy(), a.argmin(1))
    assert lt.argmin(x).item() == a.argmin()
    np.testing.assert_array_equal(x.min(0).indices.numpy(), a.argmin(0))


# ---- masked_fill
def test_masked_fill_keeps_the_input_dtype_and_shape():
    y = lt.tensor([1, 2, 3]).masked_fill(lt.tensor([True, False, True]), 0.5)
    assert y.dtype == lt.int64 and y.tolist() == [0, 2, 0]
    y = lt.ones(2, 3).masked_fill(lt.tensor([True, False, True]), lt.tensor(-1.0))
    assert y.shape == (2, 3) and y.tolist() == [[-1.0, 1.0, -1.0], [-1.0, 1.0, -1.0]]
    with pytest.raises(ValueError, match=r"\[masked_fill\].*does not broadcast"):
        lt.zeros(3).masked_fill(lt.tensor([[True], [False]]), 1.0)


# ---- argument checks
def test_shape_argument_checks():
    a = lt.ones(2, 3, 4)
    with pytest.raises(ValueError, match=r"\[flatten\] start_dim 2 comes after end_dim 1"):
        a.flatten(2, 1)
    with pytest.raises(ValueError, match=r"\[flatten\] dim 5 is out of range"):
        a.flatten(5)
    assert a.flatten(-2).shape == (2, 12) and lt.tensor(1.0).flatten().shape == (1,)
    with pytest.raises(ValueError, match=r"\[expand\].*-1"):
        lt.ones(3, 1).expand(-1, 3, 4)
    assert lt.ones(3, 1).expand(2, -1, 4).shape == (2, 3, 4)
    with pytest.raises(ValueError, match=r"\[t\]"):
        a.t()
    assert lt.ones(2, 3).t().shape == (3, 2)
    with pytest.raises(IndexError, match=r"\[size\] dim 3 is out of range"):
        lt.ones(3).size(3)
    assert lt.ones(3).size(-1) == 3


def test_dim_0_of_a_0d_tensor():
    t = lt.tensor(3.0)
    assert lt.argmax(t, 0).item() == 0 and lt.argmin(t, -1).item() == 0
    values, indices = t.max(0)
    assert values.item() == 3.0 and indices.item() == 0
    assert t.squeeze(0).shape == () and t.squeeze(-1).item() == 3.0
    with pytest.raises(ValueError, match=r"\[argmax\] dim 1 is out of range"):
        lt.argmax(t, 1)
    with pytest.raises(ValueError, match=r"\[argmax\] dim 2 is out of range"):
        lt.argmax(lt.ones(2, 3), 2)  # was wrapped to dim 0


def test_var_and_std_positional_unbiased_as_torch():
    a = np.array([[1.0, 2.0], [3.0, 5.0]])
    x = lt.tensor(a, dtype=lt.float64)
    np.testing.assert_array_equal(x.var(1, True).numpy(), a.var(1, ddof=1))  # shape (2,)
    np.testing.assert_array_equal(x.var(1, False).numpy(), a.var(1))
    assert x.var(1, True, True).shape == (2, 1)
    assert x.var(False).item() == a.var()
    np.testing.assert_array_equal(x.std(0, False).numpy(), a.std(0))


# ---- expm1
@pytest.mark.parametrize("dt,npdt", [(lt.float32, np.float32), (lt.float64, np.float64)])
def test_expm1_is_accurate_near_zero_and_elsewhere(dt, npdt):
    tiny = [1e-30, -1e-30, 1e-10, 1e-6, -1e-6, 1e-3, -1e-3]
    x = np.array(tiny + [0.5, -0.5, 1.0, -1.0, 5.0, -20.0, 50.0, -80.0, 80.0, np.inf, -np.inf],
                 npdt)
    with np.errstate(over="ignore"):
        want = np.expm1(x)
    got = lt.expm1(lt.tensor(x, dtype=dt)).numpy()
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(npdt).eps, atol=0)
    assert np.isnan(lt.expm1(lt.tensor([np.nan], dtype=dt)).item())
    t = lt.tensor(x[:-2], dtype=dt, requires_grad=True)
    lt.expm1(t).sum().backward()
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(t.grad.numpy(), np.exp(x[:-2]), rtol=4 * np.finfo(npdt).eps)


def test_arange_of_int64_past_2_to_the_53_is_exact():
    start = 2**53
    np.testing.assert_array_equal(lt.arange(start, start + 4).numpy(),
                                  np.arange(start, start + 4, dtype=np.int64))
    np.testing.assert_array_equal(lt.arange(2**62 + 9, 2**62, -3).numpy(),
                                  np.arange(2**62 + 9, 2**62, -3, dtype=np.int64))


def test_floor_trunc_ceil_keep_the_sign_of_zero():
    x = np.array([-0.0, 0.0, -0.3, 0.3, -1.5, 2.5, -7.0], np.float32)
    t = lt.tensor(x)
    for got, want in ((lt.floor(t), np.floor(x)), (lt.trunc(t), np.trunc(x)),
                      (lt.ceil(t), np.ceil(x))):
        g = got.numpy()
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(want))


def test_max_and_min_along_a_dim_send_the_gradient_to_the_returned_index():
    """torch: max(dim)'s values are the elements at the indices it returns, so a tie's
    gradient goes to that one (amax splits it)."""
    x = lt.tensor([[1.0, 3.0, 3.0], [2.0, -1.0, -1.0]], requires_grad=True)
    v, i = x.max(1)
    assert v.tolist() == [3.0, 2.0] and i.tolist() == [1, 0]
    w, j = x.min(1, keepdim=True)
    assert w.tolist() == [[1.0], [-1.0]] and j.tolist() == [[0], [1]]
    (v.sum() + 2 * w.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 1.0, 0.0], [1.0, 2.0, 0.0]])
    y = lt.tensor([[1.0, float("nan"), float("-inf")]])
    v, i = y.max(1)
    assert np.isnan(v.item()) and i.item() == 1
    assert np.isnan(y.min(1).values.item())  # NaN propagates, as torch


def test_sign_keeps_nan():
    x = np.array([np.nan, -2.5, 0.0, -0.0, 3.0], np.float32)
    np.testing.assert_array_equal(lt.sign(lt.tensor(x)).numpy(), np.sign(x))


@pytest.mark.parametrize("dt", [lt.float16, lt.bfloat16])
def test_var_and_std_of_16_bit_floats_past_their_range_count_in_float32(dt):
    """70,000 elements: the count and the sum of squares exceed float16's 65,504 (torch
    computes in float32 and casts back)."""
    x = np.random.default_rng(0).standard_normal((2, 70000)).astype(np.float32)
    t = lt.tensor(x).to(dt)
    ref = t.float().numpy().astype(np.float64)  # the values t holds
    for got, want in ((t.var(), ref.var(ddof=1)), (t.std(dim=1), ref.std(axis=1, ddof=1)),
                      (lt.var(t, dim=1, correction=0), ref.var(axis=1))):
        assert got.dtype == dt
        np.testing.assert_allclose(got.float().numpy(), want, rtol=1e-2)


def test_flip_reverses_along_dims_with_its_gradient():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = lt.tensor(a, requires_grad=True)
    np.testing.assert_array_equal(t.flip(1).detach().numpy(), np.flip(a, 1))
    np.testing.assert_array_equal(lt.flip(t, (0, -1)).detach().numpy(), np.flip(a, (0, 2)))
    np.testing.assert_array_equal(t.flip(()).detach().numpy(), a)
    w = np.random.default_rng(1).standard_normal(a.shape).astype(np.float32)
    (lt.flip(t, [2, 0]) * lt.tensor(w)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.flip(w, (2, 0)))
    with pytest.raises(ValueError, match=r"\[flip\] dims \[1, -2\] name a dim more than once"):
        t.flip(1, -2)
    with pytest.raises(ValueError, match=r"\[flip\] dim 3 is out of range"):
        t.flip(3)
    with pytest.raises(TypeError, match=r"\[flip\] give the dims"):
        t.flip()


def test_setitem_keeps_negative_zero_and_drops_leading_ones_of_the_value():
    t = lt.ones(4)
    t[1] = -0.0
    t[lt.tensor([2, 2])] = lt.tensor([5.0, -0.0])  # the last write to a position wins
    got = t.numpy()
    np.testing.assert_array_equal(got, [1, 0, 0, 1])
    assert np.signbit(got).tolist() == [False, True, True, False]
    m = lt.zeros(2, 3)
    m[0] = lt.tensor([[1.0, 2.0, 3.0]])  # [1, 3] into a row of 3, as numpy and torch
    np.testing.assert_array_equal(m.numpy(), [[1, 2, 3], [0, 0, 0]])


def test_clamp_with_a_bound_outside_the_integer_dtype_names_clamp():
    x = lt.tensor([1, 2, 3], dtype=lt.int32)
    with pytest.raises(ValueError, match=r"^\[clamp\] the integer 1099511627776 does not fit in int32"):
        lt.clamp(x, min=2**40)
    with pytest.raises(ValueError, match=r"^\[clamp\] the integer -1099511627776"):
        x.clamp(max=-2**40)


# ---- reductions' and creations' dtypes and edge cases (torch's results)
def test_min_and_max_over_a_dim_keep_bool_and_int32_values():
    b = lt.tensor([[True, False], [True, True]])
    bn = np.array([[True, False], [True, True]])
    assert b.min(1).values.tolist() == bn.min(1).tolist() == [False, True]
    assert b.max(1).values.tolist() == bn.max(1).tolist()
    i = lt.tensor([[3, -1, 5], [2, 7, 7]], dtype=lt.int32)
    for r, want in ((i.max(1), [5, 7]), (i.min(1), [-1, 2])):
        assert r.values.dtype == lt.int32 and r.values.tolist() == want
    assert i.sum(dtype=lt.int32).dtype == lt.int32 and i.sum(dtype=lt.int32).item() == 23


def test_var_and_std_over_the_dim_of_a_0d_tensor():
    x = lt.tensor(2.0)
    assert np.isnan(x.std(0).item()) and np.isnan(x.var(-1).item())  # one value, correction 1
    assert x.var(0, correction=0).item() == 0.0 and x.var(0, keepdim=True).shape == ()


@pytest.mark.parametrize("call", [lambda t: t.exp_(), lambda t: t.sqrt_(), lambda t: t.sigmoid_(),
                                  lambda t: t.pow_(0.5), lambda t: t.clamp_(0.5, 1.5)])
def test_in_place_methods_never_truncate_a_floating_result(call):
    for t in (lt.tensor([1, 2]), lt.tensor([True, False])):
        with pytest.raises(RuntimeError, match="can't be cast to the tensor's dtype in place"):
            call(t)
        assert t.dtype in (lt.int64, lt.bool)
    x = lt.tensor([1.0, 4.0])
    assert call(x) is x


def test_cat_and_stack_refuse_a_tensor_for_the_list():
    for f in (lt.cat, lt.stack):
        with pytest.raises(TypeError, match=r"expects a list or tuple of tensors, got a Tensor"):
            f(lt.ones(2, 3))


def test_squeeze_refuses_a_repeated_dim():
    with pytest.raises(ValueError, match="names a dim more than once"):
        lt.zeros(1, 1, 3).squeeze((0, 0))
    assert lt.zeros(1, 1, 3).squeeze((0, 1)).shape == (3,)


def test_arange_of_integer_tensors_is_int64():
    r = lt.arange(lt.tensor(3))
    assert r.dtype == lt.int64 and r.tolist() == [0, 1, 2]
    assert lt.arange(lt.tensor(1), 4).tolist() == [1, 2, 3]


def test_sign_and_isfinite_of_bool_and_integer_tensors():
    assert lt.tensor([True, False]).sign().tolist() == [True, False]
    assert lt.tensor([True]).isfinite().tolist() == [True]
    assert lt.tensor([1, -2]).isfinite().tolist() == [True, True]


def test_full_refuses_a_value_its_dtype_overflows_and_takes_a_one_element_tensor():
    for value, d in ((1e6, lt.float16), (-1e39, lt.bfloat16), (1e39, lt.float32)):
        with pytest.raises(ValueError, match="without overflow"):
            lt.full((2,), value, dtype=d)
    assert lt.full((1,), 65504.0, dtype=lt.float16).item() == 65504.0
    assert lt.full((1,), float("inf"), dtype=lt.float16).item() == float("inf")
    assert lt.full((2,), lt.tensor(2.5)).tolist() == [2.5, 2.5]
    assert lt.full((2,), lt.tensor(2.5), dtype=lt.int64).tolist() == [2, 2]
    assert lt.ones(3).fill_(lt.tensor(3.0)).tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="one-element tensor"):
        lt.full((2,), lt.ones(2))


def test_broadcast_to_keeps_a_size_given_as_minus_one():
    x = lt.tensor([1.0, 2.0, 3.0])
    assert lt.broadcast_to(x, (2, -1)).tolist() == np.broadcast_to([1.0, 2.0, 3.0], (2, 3)).tolist()


def test_operators_with_none_and_logical_ops_with_numbers_follow_python():
    t = lt.tensor([1, 0, 2])
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'Tensor' and 'NoneType'"):
        t + None
    with pytest.raises(TypeError, match="unsupported operand"):
        t += None
    with pytest.raises(TypeError, match="not supported between"):
        t < None
    assert (t == None) is False and (t != None) is True  # noqa: E711
    assert lt.logical_and(t, True).tolist() == [True, False, True]
    assert lt.logical_or(t, 0).tolist() == [True, False, True]
    assert lt.logical_xor(t, [1, 1, 0]).tolist() == [False, True, True]


def test_errors_name_what_the_user_wrote():
    with pytest.raises(IndexError, match=r"index 5 is out of range for dim 0 of size 3 \(f32\[3\]\)"):
        lt.zeros(3)[5] = 1.0
    with pytest.raises(ValueError, match="the -1 could be any size"):
        lt.zeros(0, 3).reshape(0, -1)
    x = lt.tensor([0.3, 0.7], dtype=lt.float64, requires_grad=True)
    c, _ = lt.scan(lambda c, xx: (c * c * xx, None), x, lt.ones(2, dtype=lt.float64))
    with pytest.raises(RuntimeError, match="higher-order gradients"):
        lt.autograd.grad(c.sum(), x, create_graph=True)


def test_more_operators_with_foreign_operands_and_fill_with_a_tensor():
    t = lt.tensor([7, 2])
    for op in ("__floordiv__", "__mod__", "__and__", "__ifloordiv__", "__imod__", "__iand__"):
        assert getattr(t, op)(None) is NotImplemented

    class Other:
        def __rfloordiv__(self, o):
            return "theirs"

    assert t // Other() == "theirs"
    assert (7 // t).tolist() == [1, 3] and (t % 3).tolist() == [1, 2]
    v = lt.tensor(2.0, requires_grad=True)
    x = lt.zeros(3)
    x.fill_(v)  # differentiable, as torch's
    x.sum().backward()
    assert v.grad.item() == 3.0


def test_index_errors_name_the_dim_of_the_tensor_indexed():
    for key in ((0, 5), (None, 1, 5), (Ellipsis, 7)):
        with pytest.raises(IndexError, match=r"out of range for dim 1 of size 3 \(f32\[2, 3\]\)"):
            lt.zeros(2, 3)[key]
