"""sixfold.attention / attention_varlen / merge_attention_states through the bindings, against a
float64 numpy reference written independently of the C++ one (materialized scores, masks as
boolean matrices), on fresh random inputs; torch's SDPA as a second reference where installed
(CPU bf16, and CUDA bf16/f16 on a GPU machine)."""
import numpy as np
import pytest

import sixfold

rng = np.random.default_rng()


def ref_attention(q, k, v, *, causal=False, scale=None, left=-1, right=-1):
    """float64 (out, lse) for BHLD arrays."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    g = hq // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
    diag = i + (lk - lq)
    vis = np.ones((lq, lk), dtype=bool)
    if causal:
        vis &= j <= diag
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if lk else np.full((b, hq, lq, 1), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    out = np.where(l > 0, (p @ v) / np.where(l > 0, l, 1.0), 0.0)
    lse = np.where(l[..., 0] > 0, m[..., 0] + np.log(np.where(l[..., 0] > 0, l[..., 0], 1.0)), -np.inf)
    return out, lse


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def assert_close(out, lse, ref_out, ref_lse, tol=3e-5):
    vmax = max(float(np.abs(ref_out).max(initial=0.0)), 1e-30)
    assert np.abs(np.asarray(out, dtype=np.float64) - ref_out).max(initial=0.0) <= tol * max(vmax, 1.0)
    if lse is not None:
        lse = np.asarray(lse, dtype=np.float64)
        assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
        fin = np.isfinite(ref_lse)
        assert np.all(np.abs(lse[fin] - ref_lse[fin]) <= 3e-5 * (1 + np.abs(ref_lse[fin])))


@pytest.mark.parametrize("lq,lk", [(1, 1), (17, 128), (128, 17), (1, 1000), (300, 300)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (4, 1), (6, 2)])
def test_numpy_f32_against_float64(lq, lk, causal, heads):
    hq, hkv = heads
    q, k, v = randn(2, hq, lq, 64), randn(2, hkv, lk, 64), randn(2, hkv, lk, 64)
    out, lse = sixfold.attention(q, k, v, causal=causal, return_lse=True)
    assert out.dtype == np.float32 and out.shape == q.shape and lse.shape == (2, hq, lq)
    assert_close(out, lse, *ref_attention(q, k, v, causal=causal))


def test_blhd_layout_and_zero_copy_out():
    q, k, v = randn(2, 77, 4, 32), randn(2, 130, 2, 32), randn(2, 130, 2, 32)  # (b, l, h, d)
    out = np.full_like(q, np.nan)
    y, lse = sixfold.attention(q, k, v, causal=True, layout="blhd", out=out, return_lse=True, scale=0.2)
    assert y is out and lse.shape == (2, 4, 77)
    assert sixfold._C.last_call_pointers() == (q.ctypes.data, out.ctypes.data)
    ref_o, ref_l = ref_attention(*(t.swapaxes(1, 2) for t in (q, k, v)), causal=True, scale=0.2)
    assert_close(out.swapaxes(1, 2), lse, ref_o, ref_l)


@pytest.mark.parametrize("window", [(0, 0), (5, None), (None, 3), (16, 16)])
def test_sliding_windows(window):
    q, k, v = randn(1, 2, 90, 48), randn(1, 2, 140, 48), randn(1, 2, 140, 48)
    out, lse = sixfold.attention(q, k, v, window=window, return_lse=True)
    left, right = (-1 if w is None else w for w in window)
    assert_close(out, lse, *ref_attention(q, k, v, left=left, right=right))


def test_rows_without_keys_are_zero_with_minus_inf_lse():
    q, k, v = randn(1, 1, 20, 16), randn(1, 1, 5, 16), randn(1, 1, 5, 16)
    out, lse = sixfold.attention(q, k, v, causal=True, return_lse=True)  # rows 0..14 see nothing
    assert np.all(out[0, 0, :15] == 0) and np.all(np.isneginf(lse[0, 0, :15]))
    assert_close(out, lse, *ref_attention(q, k, v, causal=True))


def test_varlen_matches_per_sequence_attention():
    lq, lk = [5, 0, 33, 1, 64], [7, 3, 33, 50, 0]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q, k, v = randn(cq[-1], 4, 64), randn(ck[-1], 2, 64), randn(ck[-1], 2, 64)
    out, lse = sixfold.attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (4, cq[-1])
    for s in range(len(lq)):
        qs = q[cq[s]:cq[s + 1]].transpose(1, 0, 2)[None]
        ks = k[ck[s]:ck[s + 1]].transpose(1, 0, 2)[None]
        vs = v[ck[s]:ck[s + 1]].transpose(1, 0, 2)[None]
        ro, rl = ref_attention(qs, ks, vs, causal=True)
        assert_close(out[cq[s]:cq[s + 1]].transpose(1, 0, 2)[None], lse[:, cq[s]:cq[s + 1]][None], ro, rl)


def test_merge_of_disjoint_key_sets_is_the_full_attention():
    q, k, v = randn(2, 4, 9, 64), randn(2, 2, 500, 64), randn(2, 2, 500, 64)
    o1, l1 = sixfold.attention(q, k[:, :, :200], v[:, :, :200], return_lse=True)
    o2, l2 = sixfold.attention(q, k[:, :, 200:], v[:, :, 200:], return_lse=True)
    out, lse = sixfold.merge_attention_states(o1, l1, o2, l2)
    assert_close(out, lse, *ref_attention(q, k, v))
    sixfold.merge_attention_states(o1, l1, o2, l2, out=o1, lse_out=l1)  # in place
    assert_close(o1, l1, *ref_attention(q, k, v))
    # a side that saw no key contributes nothing
    empty = np.full_like(l2, -np.inf)
    same, same_l = sixfold.merge_attention_states(o2, l2, np.zeros_like(o2), empty)
    assert np.allclose(same, o2, atol=1e-6) and np.allclose(same_l, l2, atol=1e-6)


def test_errors_name_the_argument_and_write_nothing():
    q, k = randn(1, 4, 8, 16), randn(1, 2, 8, 8)
    out = np.full_like(q, np.nan)
    with pytest.raises(sixfold.Error, match=r"argument 'k': expected head_dim 16"):
        sixfold.attention(q, k, k, out=out)
    with pytest.raises(sixfold.Error, match="dividing q_heads"):
        sixfold.attention(q, randn(1, 3, 8, 16), randn(1, 3, 8, 16), out=out)
    with pytest.raises(sixfold.Error, match="params.window_right"):
        sixfold.attention(q, q, q, causal=True, window=(None, 4), out=out)
    assert np.all(np.isnan(out))
    qv = randn(10, 2, 16)
    with pytest.raises(sixfold.Error, match="non-decreasing"):
        sixfold.attention_varlen(qv, qv, qv, np.array([0, 6, 4, 10], np.int32), np.array([0, 4, 8, 10], np.int32))
    with pytest.raises(sixfold.Error, match="dtype i32"):
        sixfold.attention_varlen(qv, qv, qv, np.array([0, 10], np.int64), np.array([0, 10], np.int32))


def _torch():
    try:
        import torch as t
        return t
    except ImportError:
        return None


@pytest.mark.skipif(_torch() is None, reason="torch is not installed")
def test_torch_cpu_bf16_against_sdpa():
    t = _torch()
    q = t.randn(2, 8, 200, 128, dtype=t.bfloat16)
    k = t.randn(2, 2, 300, 128, dtype=t.bfloat16)
    v = t.randn(2, 2, 300, 128, dtype=t.bfloat16)
    out = sixfold.attention(q, k, v, causal=True)
    assert out.dtype == t.bfloat16 and sixfold._C.last_call_pointers()[0] == q.data_ptr()
    ref_o, _ = ref_attention(q.float().numpy(), k.float().numpy(), v.float().numpy(), causal=True)
    # bf16 output: within half an ulp of bf16 of the float64 result, plus f32 arithmetic
    err = np.abs(out.float().numpy().astype(np.float64) - ref_o)
    assert np.all(err <= np.abs(ref_o) / 256 + 1e-4)
    # torch's SDPA (its own causal convention is top-left: compare on equal lengths)
    kk = t.repeat_interleave(k[:, :, :200], 4, dim=1)
    vv = t.repeat_interleave(v[:, :, :200], 4, dim=1)
    want = t.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), vv.float(), is_causal=True)
    got = sixfold.attention(q, k[:, :, :200], v[:, :, :200], causal=True)
    assert (got.float() - want).abs().max().item() <= 2e-2


@pytest.mark.gpu
@pytest.mark.skipif(_torch() is None or not sixfold.cuda_available(), reason="no CUDA device usable")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_torch_cuda_against_float64_and_sdpa(dtype, d):
    t = _torch()
    dt = getattr(t, dtype)
    q = t.randn(2, 8, 1000, d, device="cuda", dtype=dt)
    k = t.randn(2, 2, 1000, d, device="cuda", dtype=dt)
    v = t.randn(2, 2, 1000, d, device="cuda", dtype=dt)
    out, lse = sixfold.attention(q, k, v, causal=True, return_lse=True)
    t.cuda.synchronize()
    ref_o, ref_l = ref_attention(q.float().cpu().numpy(), k.float().cpu().numpy(), v.float().cpu().numpy(),
                                 causal=True)
    # naive attention in the low dtype: scores, probabilities and output rounded to it
    kk, vv = (t.repeat_interleave(x, 4, dim=1) for x in (k, v))
    s = (q @ kk.transpose(-1, -2)) * (1.0 / d ** 0.5)
    s = s.masked_fill(t.ones(1000, 1000, device="cuda", dtype=t.bool).triu(1), float("-inf"))
    naive = t.softmax(s.float(), dim=-1).to(dt) @ vv
    err = np.abs(out.float().cpu().numpy() - ref_o).max()
    naive_err = np.abs(naive.float().cpu().numpy() - ref_o).max()
    assert err <= 2 * naive_err + 1e-5
    assert np.abs(lse.cpu().numpy() - ref_l).max() <= 1e-2
