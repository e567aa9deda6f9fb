"""sixfold.selective_scan and sixfold.selective_state_update through the bindings: against a
float64 numpy loop (mamba-ssm's reference semantics) on fresh random inputs, varlen, final state,
errors with the C++ message; on the GPU (torch CUDA tensors) the same checks."""
import numpy as np
import pytest

import sixfold

rng = np.random.default_rng()


def softplus(x):
    return np.where(x <= 20, np.log1p(np.exp(np.minimum(x, 20))), x)


def reference(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, h0=None):
    """float64 sequential loop; B, C fixed (d, n) or (batch, groups, n, L). Returns (out, state)."""
    u, delta, A = (np.asarray(t, np.float64) for t in (u, delta, A))
    batch, d, L = u.shape
    n = A.shape[1]
    dt = delta + (0 if delta_bias is None else np.asarray(delta_bias, np.float64)[None, :, None])
    if delta_softplus:
        dt = softplus(dt)

    def per_channel(M):
        M = np.asarray(M, np.float64)
        if M.ndim == 2:
            return np.broadcast_to(M[None, :, :, None], (batch, d, n, L))
        return np.repeat(M, d // M.shape[1], axis=1)        # (batch, d, n, L)

    Bc, Cc = per_channel(B), per_channel(C)
    h = np.zeros((batch, d, n)) if h0 is None else np.asarray(h0, np.float64).copy()
    y = np.empty((batch, d, L))
    for t in range(L):
        h = np.exp(dt[:, :, t, None] * A[None]) * h + (dt[:, :, t] * u[:, :, t])[:, :, None] * Bc[..., t]
        y[:, :, t] = (h * Cc[..., t]).sum(-1)
    if D is not None:
        y += np.asarray(D, np.float64)[None, :, None] * u
    if z is not None:
        z = np.asarray(z, np.float64)
        y *= z / (1 + np.exp(-z))
    return y, h


def inputs(batch, d, n, L, groups, var=True, dtype=np.float32):
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
    u = rng.uniform(-2, 2, (batch, d, L)).astype(dtype)
    delta = rng.uniform(-4, 1, (batch, d, L)).astype(dtype)
    A = -np.exp(rng.uniform(np.log(0.05), np.log(4), (d, n))).astype(np.float32)
    B = f(batch, groups, n, L).astype(dtype) if var else f(d, n)
    C = f(batch, groups, n, L).astype(dtype) if var else f(d, n)
    z = rng.uniform(-3, 3, (batch, d, L)).astype(dtype)
    return u, delta, A, B, C, f(d), z, f(d) * 0.5


@pytest.mark.parametrize("batch,d,n,L,groups,var", [(2, 4, 16, 7, 1, True), (1, 6, 64, 2049, 2, True),
                                                     (3, 5, 1, 300, 1, False), (1, 8, 256, 33, 4, True)])
def test_selective_scan_matches_loop(batch, d, n, L, groups, var):
    u, delta, A, B, C, D, z, bias = inputs(batch, d, n, L, groups, var)
    h0 = rng.uniform(-1, 1, (batch, d, n)).astype(np.float32)
    out, last = sixfold.selective_scan(u, delta, A, B, C, D, z, bias, True, True, initial_state=h0)
    ref, ref_h = reference(u, delta, A, B, C, D, z, bias, True, h0)
    assert out.dtype == np.float32 and out.shape == u.shape and last.shape == (batch, d, n)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(last, ref_h, rtol=1e-4, atol=1e-4 * np.abs(ref_h).max())


def test_three_dim_B_C_is_one_group():
    u, delta, A, B, C, D, z, bias = inputs(2, 4, 16, 33, 1)
    out3 = sixfold.selective_scan(u, delta, A, B[:, 0], C[:, 0], D, z, bias, True)
    out4 = sixfold.selective_scan(u, delta, A, B, C, D, z, bias, True)
    np.testing.assert_array_equal(out3, out4)


def test_varlen_equals_separate_sequences():
    d, n, groups, lens = 4, 16, 2, [5, 0, 1000, 1]
    total = sum(lens)
    u, delta, A, B, C, D, z, bias = inputs(1, d, n, total, groups)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    out, last = sixfold.selective_scan(u[0], delta[0], A, B[0], C[0], D, z[0], bias, True, True, cu_seqlens=cu)
    for q, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        ref, ref_h = reference(u[..., s:e], delta[..., s:e], A, B[..., s:e], C[..., s:e], D, z[..., s:e], bias, True)
        if e > s:
            np.testing.assert_allclose(out[:, s:e], ref[0], rtol=1e-4, atol=1e-4 * np.abs(ref).max())
        np.testing.assert_allclose(last[q], ref_h[0], rtol=1e-4, atol=1e-4 * max(np.abs(ref_h).max(), 1e-30))


def test_state_update_matches_loop():
    batch, d, n, groups = 3, 8, 16, 2
    x, dt, z = (rng.uniform(-2, 2, (batch, d)).astype(np.float32) for _ in range(3))
    A = -np.exp(rng.uniform(np.log(0.05), np.log(4), (d, n))).astype(np.float32)
    B, C = (rng.uniform(-1, 1, (batch, groups, n)).astype(np.float32) for _ in range(2))
    D, bias = (rng.uniform(-1, 1, d).astype(np.float32) for _ in range(2))
    state = rng.uniform(-1, 1, (batch, d, n)).astype(np.float32)
    h0 = state.copy()
    out = sixfold.selective_state_update(state, x, dt, A, B, C, D, z, bias, True)
    ref, ref_h = reference(x[..., None], dt[..., None], A, B[..., None], C[..., None], D, z[..., None], bias, True, h0)
    np.testing.assert_allclose(out, ref[..., 0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, ref_h, rtol=1e-4, atol=1e-5)


def test_errors_name_the_argument():
    u, delta, A, B, C, D, z, bias = inputs(1, 6, 4, 10, 1)
    with pytest.raises(sixfold.Error, match="argument 'B'"):
        sixfold.selective_scan(u, delta, A, np.ones((1, 4, 4, 10), np.float32), C)   # 4 groups, d = 6
    with pytest.raises(sixfold.Error, match="argument 'A'"):
        sixfold.selective_scan(u, delta, np.ones((5, 4), np.float32), B, C)
    with pytest.raises(sixfold.Error, match="d_state n in 1..256"):
        sixfold.selective_scan(u, delta, -np.ones((6, 300), np.float32), np.ones((6, 300), np.float32),
                               np.ones((6, 300), np.float32))


@pytest.mark.gpu
def test_cuda_tensors_match_loop():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and sixfold.cuda_available()):
        pytest.skip("no usable CUDA device")
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 2e-2)):
        u, delta, A, B, C, D, z, bias = inputs(2, 64, 16, 4097, 2)
        tt = lambda a, dt=dtype: torch.from_numpy(np.ascontiguousarray(a)).to("cuda", dt)
        tu, td, tz, tB, tC = tt(u), tt(delta), tt(z), tt(B), tt(C)
        out, last = sixfold.selective_scan(tu, td, tt(A, torch.float32), tB, tC, tt(D, torch.float32), tz,
                                           tt(bias, torch.float32), True, True)
        torch.cuda.synchronize()
        q = lambda t: t.float().cpu().numpy()
        ref, ref_h = reference(q(tu), q(td), A, q(tB), q(tC), D, q(tz), bias, True)
        np.testing.assert_allclose(q(out), ref, rtol=tol, atol=tol * np.abs(ref).max())
        np.testing.assert_allclose(q(last), ref_h, rtol=1e-4, atol=1e-4 * np.abs(ref_h).max())
