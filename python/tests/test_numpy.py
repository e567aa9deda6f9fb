"""Every op through the bindings with numpy arrays, against float64 references, on fresh random
inputs; zero-copy (the kernel sees the caller's pointers); errors carry the C++ message."""
import numpy as np
import pytest

import sixfold

rng = np.random.default_rng()
SIZES = [0, 1, 17, 4097, 65537, 1_000_003]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scans_and_reduce_match_float64(n, dtype):
    x = rng.uniform(-1, 1, n).astype(dtype)
    ref = np.cumsum(x.astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    scale = np.maximum(np.cumsum(np.abs(x.astype(np.float64))), 1.0)
    y = sixfold.inclusive_scan(x)
    assert y.dtype == dtype and y.shape == x.shape
    assert np.all(np.abs(y - ref) <= tol * scale)
    e = sixfold.exclusive_scan(x)
    ref_e = np.concatenate([[0.0], ref[:-1]]) if n else ref
    assert np.all(np.abs(e - ref_e) <= tol * np.maximum(np.concatenate([[1.0], scale[:-1]]), 1.0) if n else True)
    s = sixfold.reduce(x)
    assert s.shape == () and abs(float(s) - (ref[-1] if n else 0.0)) <= tol * (scale[-1] if n else 1)
    if n:
        assert sixfold.reduce(x, op="max") == x.max()
        assert np.array_equal(sixfold.inclusive_scan(x, op="min"), np.minimum.accumulate(x))


def test_int32_and_segmented_reduce():
    x = rng.integers(-1000, 1000, 100_003).astype(np.int32)
    assert np.array_equal(sixfold.inclusive_scan(x), np.cumsum(x, dtype=np.int64).astype(np.int32))
    offsets = np.sort(rng.integers(0, x.size + 1, 1001)).astype(np.int64)
    offsets[0] = 0
    out = sixfold.segmented_reduce(x, offsets)
    want = [x[a:b].astype(np.int64).sum() for a, b in zip(offsets[:-1], offsets[1:])]
    assert np.array_equal(out, np.array(want).astype(np.int32))
    mx = sixfold.segmented_reduce(x.astype(np.float64), offsets.astype(np.int32), op="max")
    for s, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        assert mx[s] == (x[a:b].max() if b > a else -np.inf)


def test_zero_copy_in_and_out_and_in_place():
    x = rng.uniform(-1, 1, 4097).astype(np.float32)
    out = np.full_like(x, np.nan)
    y = sixfold.inclusive_scan(x, out=out)
    assert y is out
    assert sixfold._C.last_call_pointers() == (x.ctypes.data, out.ctypes.data)
    xc = x.copy()
    sixfold.inclusive_scan(xc, out=xc)  # in place
    assert np.allclose(xc, np.cumsum(x.astype(np.float64)), atol=1e-4)


def test_errors_name_the_argument_and_write_nothing():
    x = rng.uniform(-1, 1, 10).astype(np.float32)
    out = np.full(9, np.nan, dtype=np.float32)
    with pytest.raises(sixfold.Error, match=r"argument 'out': expected shape \[10\]"):
        sixfold.inclusive_scan(x, out=out)
    assert np.isnan(out).all()
    with pytest.raises(sixfold.Error, match=r"argument 'x': expected a contiguous"):
        sixfold.inclusive_scan(x[::2])  # strided input: an error, never a hidden copy
    with pytest.raises(sixfold.Error, match=r"dtype f32, f64 or i32, got f16"):
        sixfold.inclusive_scan(x.astype(np.float16))
    with pytest.raises(sixfold.Error, match=r"argument 'op'"):
        sixfold.reduce(x, op="mean")
    with pytest.raises(sixfold.Error, match=r"argument 'offsets'"):
        sixfold.segmented_reduce(x, np.array([0, 5, 3], dtype=np.int64))
    with pytest.raises(sixfold.Error, match=r"argument 'out': expected dtype f32, got f64"):
        sixfold.inclusive_scan(x, out=np.empty(10))


def test_laws_through_python():
    laws = sixfold.check_laws(200)
    assert len(laws) >= 18 and all(ok for _, ok, _ in laws)
    bad = sixfold.check_laws(200, counterexamples=True)
    assert len(bad) == 3 and not any(ok for _, ok, _ in bad)
    assert all("counterexample" in text for _, _, text in bad)


@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (5, 4097), (3, 1000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_norms_match_float64(shape, dtype):
    x = rng.normal(0.5, 2.0, shape).astype(dtype)
    w = rng.normal(1.0, 0.1, shape[-1]).astype(dtype)
    b = rng.normal(0.0, 0.1, shape[-1]).astype(dtype)
    xd, wd, bd = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    tol = 2e-5 if dtype == np.float32 else 3e-3
    rms = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-6) * wd
    mean = xd.mean(-1, keepdims=True)
    ln = (xd - mean) / np.sqrt(((xd - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * wd + bd
    e = np.exp(xd - xd.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    lsm = xd - xd.max(-1, keepdims=True) - np.log(e.sum(-1, keepdims=True))
    for got, want in [(sixfold.rms_norm(x, w), rms), (sixfold.layer_norm(x, w, b), ln),
                      (sixfold.softmax(x), sm), (sixfold.log_softmax(x), lsm)]:
        assert got.dtype == dtype and got.shape == x.shape
        scale = np.abs(want).max(-1, keepdims=True)
        assert np.all(np.abs(got - want) <= tol * (np.abs(want) + scale))


def test_norm_strided_rows_in_place_and_errors():
    base = rng.normal(size=(6, 40)).astype(np.float32)
    x = base[:, :33]  # rows with a stride of 40: read in place
    y = sixfold.softmax(x)
    e = np.exp(x - x.max(-1, keepdims=True))
    assert np.allclose(y, e / e.sum(-1, keepdims=True), atol=1e-6)
    z = base.copy()
    sixfold.rms_norm(z, out=z)
    assert np.allclose(z, base / np.sqrt((base.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6), atol=1e-5)
    with pytest.raises(sixfold.Error, match=r"argument 'weight': expected shape \[40\]"):
        sixfold.rms_norm(base, np.ones(39, np.float32))
    with pytest.raises(sixfold.Error, match="unit stride in the last dimension"):
        sixfold.softmax(base.T)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_activations_match_float64(dtype):
    from math import erf, sqrt, pi, tanh, exp
    x = rng.normal(0, 3, (7, 1001)).astype(dtype)
    g = rng.normal(0, 3, (7, 1001)).astype(dtype)
    b = rng.normal(0, 0.3, 1001).astype(dtype)
    u = x.astype(np.float64) + b.astype(np.float64)
    gelu = 0.5 * u * (1 + np.vectorize(erf)(u / sqrt(2)))
    gelu_t = 0.5 * u * (1 + np.tanh(sqrt(2 / pi) * (u + 0.044715 * u ** 3)))
    xd = x.astype(np.float64)
    silu = xd / (1 + np.exp(-xd)) * g.astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    for got, want in [(sixfold.bias_gelu(x, b), gelu), (sixfold.bias_gelu(x, b, approximate="tanh"), gelu_t),
                      (sixfold.silu_gate(x, g), silu)]:
        assert got.dtype == dtype
        assert np.all(np.abs(got - want) <= tol * (np.abs(want) + 1))
    with pytest.raises(sixfold.Error, match="argument 'approximate'"):
        sixfold.bias_gelu(x, approximate="fast")


@pytest.mark.parametrize("lead", [(0,), (2, 0)])
def test_empty_rows_give_empty_results(lead):
    """Arrays with no rows (numpy reports any strides for them) are accepted: empty outputs, and
    weight gradients summed over no rows are zero."""
    n = 8
    x = np.zeros(lead + (n,), np.float32)
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    for y in (sixfold.rms_norm(x, w), sixfold.layer_norm(x, w, w), sixfold.softmax(x),
              sixfold.log_softmax(x), sixfold.bias_gelu(x, w), sixfold.silu_gate(x, x)):
        assert y.shape == x.shape
    s, y = sixfold.add_rms_norm(x, x, w)
    assert s.shape == x.shape and y.shape == x.shape
    values, indices = sixfold.topk(x, 3)
    assert values.shape == lead + (3,) and indices.shape == lead + (3,)
    dx, dw = sixfold.rms_norm_backward(x, x, w)
    assert dx.shape == x.shape and np.array_equal(dw, np.zeros(n, np.float32))
    dx, dw, db = sixfold.layer_norm_backward(x, x, w)
    assert dx.shape == x.shape and not dw.any() and not db.any()
    assert sixfold.softmax_backward(x, x).shape == x.shape
