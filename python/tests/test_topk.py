"""sixfold.topk and sixfold.TopKStream through the bindings: exact against a float64 stable
sort (numpy), deterministic ties (lower index wins), NaN above +inf, errors with the C++
message; torch.topk as a second reference on the GPU where torch and a GPU are present."""
import numpy as np
import pytest

import sixfold

rng = np.random.default_rng()


def reference(x, k, largest=True):
    """Indices of the k best per row by a stable sort: NaN above +inf, lower index first."""
    x = np.asarray(x, dtype=np.float64)
    key = np.where(np.isnan(x), np.inf, x)
    nan = np.isnan(x)
    if largest:
        order = np.lexsort((-key, ~nan), axis=-1) if x.ndim == 1 else np.stack(
            [np.lexsort((-key[r], ~nan[r])) for r in range(x.shape[0])])
    else:
        order = np.lexsort((key, nan), axis=-1) if x.ndim == 1 else np.stack(
            [np.lexsort((key[r], nan[r])) for r in range(x.shape[0])])
    return order[..., :k]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape,k", [((1,), 1), ((7,), 7), ((3, 4097), 17), ((2, 300_007), 1000),
                                     ((64, 1000), 8)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_stable_sort(dtype, shape, k, largest):
    if dtype == np.int32:
        x = rng.integers(-50, 50, shape).astype(dtype)
    else:
        x = rng.normal(0, 10, shape).astype(dtype)
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = np.nan
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = np.inf
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = -0.0
    v, i = sixfold.topk(x, k, largest=largest)
    assert v.dtype == x.dtype and i.dtype == np.int64 and v.shape == shape[:-1] + (k,)
    ref = reference(x.reshape(-1, shape[-1]), k, largest).reshape(shape[:-1] + (k,))
    assert np.array_equal(i, ref)
    assert np.array_equal(v, np.take_along_axis(x, ref, axis=-1), equal_nan=dtype != np.int32)


def test_unsorted_is_the_same_set():
    x = rng.integers(0, 5, (4, 5000)).astype(np.float32)
    v, i = sixfold.topk(x, 300, sorted=False)
    ref = reference(x, 300)
    assert np.array_equal(np.sort(i, axis=-1), np.sort(ref, axis=-1))
    assert np.array_equal(v, np.take_along_axis(x, i, axis=-1))


def test_stream_chunks_and_merge():
    x = rng.normal(size=100_000).astype(np.float32)
    a, b = sixfold.TopKStream(50), sixfold.TopKStream(50)
    cuts = np.sort(rng.integers(0, x.size, 20))
    parts = np.split(np.arange(x.size), cuts)
    for j, p in enumerate(parts):
        if p.size:
            (a if j % 2 else b).push(x[p[0]:p[-1] + 1], int(p[0]))
    a.merge(b)
    v, i = a.result()
    assert a.seen == x.size
    assert np.array_equal(i, reference(x, 50)) and np.array_equal(v, x[i])


def test_errors_name_the_argument():
    x = np.zeros((2, 10), np.float32)
    with pytest.raises(sixfold.Error, match="'k'"):
        sixfold.topk(x, 11)
    with pytest.raises(sixfold.Error, match="'k'"):
        sixfold.topk(x, 0)
    with pytest.raises(sixfold.Error, match="'x'"):
        sixfold.topk(np.zeros((2, 10), np.int8), 3)
    v, i = np.zeros((2, 3), np.float32), np.zeros((2, 2), np.int64)
    with pytest.raises(sixfold.Error, match="'indices'"):
        sixfold.topk(x, 3, out=(v, i))


@pytest.mark.gpu
def test_cuda_matches_torch_and_reference():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and sixfold.cuda_available()):
        pytest.skip("no usable GPU")
    for rows, n, k in [(1, 3_000_017, 1000), (256, 32768, 64), (1, 1 << 20, 100_000)]:
        x = torch.randn(rows, n, device="cuda")
        v, i = sixfold.topk(x, k)
        tv, _ = torch.topk(x, k)
        assert torch.equal(v, tv)  # distinct random values: the same values in the same order
        ref = reference(x.cpu().numpy(), k)
        assert np.array_equal(i.cpu().numpy(), ref)
