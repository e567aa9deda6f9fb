"""The fused residual-add norms and the norm/softmax backward passes through the bindings:
numpy (CPU) against float64 formulas, torch (CUDA) against torch autograd in float64; in place,
determinism of the weight gradients, the saved row statistics (forward → backward), and errors
that name the argument."""
import numpy as np
import pytest

import sixfold

rng = np.random.default_rng()


def rms64(s, w, eps):
    return s / np.sqrt((s * s).mean(-1, keepdims=True) + eps) * w


def ln64(s, w, b, eps):
    mu = s.mean(-1, keepdims=True)
    return (s - mu) / np.sqrt(((s - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def norm_grads64(kind, x, dy, w, eps):
    """float64 dx, dweight, dbias of rms/layer norm (formulas of sixfold/ops/norm.hpp)."""
    n = x.shape[-1]
    mu = x.mean(-1, keepdims=True) if kind == "layer" else 0.0
    xc = x - mu
    r = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xh = xc * r
    g = dy * w
    mg = g.mean(-1, keepdims=True) if kind == "layer" else 0.0
    dx = r * (g - mg - xh * (g * xh).sum(-1, keepdims=True) / n)
    return dx, (dy * xh).reshape(-1, n).sum(0), dy.reshape(-1, n).sum(0)


def close(got, want, tol, floor=0.0):
    got = np.asarray(got, np.float64)
    scale = np.abs(want).max(axis=-1, keepdims=True) if want.ndim else abs(want)
    assert np.all(np.abs(got - want) <= tol * (np.abs(want) + scale) + floor + 1e-30), np.abs(got - want).max()


@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (7, 4097), (3, 40000), (2, 3, 100)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_add_norms_match_float64(shape, dtype):
    x = rng.normal(0.5, 2.0, shape).astype(dtype)
    r = rng.normal(0.0, 1.0, shape).astype(dtype)
    w = rng.normal(1.0, 0.1, shape[-1]).astype(dtype)
    b = rng.normal(0.0, 0.1, shape[-1]).astype(dtype)
    tol = 2e-5 if dtype == np.float32 else 2e-3
    s_want = (x.astype(np.float64) + r).astype(dtype).astype(np.float64)
    y, s = sixfold.add_rms_norm(x, r, w, eps=1e-6)
    assert y.dtype == dtype and s.shape == x.shape
    assert np.array_equal(s.astype(np.float64), s_want)
    close(y, rms64(s_want, w.astype(np.float64), 1e-6), tol)
    y, s = sixfold.add_layer_norm(x, r, w, b)
    close(y, ln64(s_want, w.astype(np.float64), b.astype(np.float64), 1e-5), tol)


def test_add_norm_in_place_residual_and_errors():
    x = rng.normal(size=(6, 40)).astype(np.float32)
    r = rng.normal(size=(6, 40)).astype(np.float32)
    want = x.astype(np.float64) + r
    y, s = sixfold.add_rms_norm(x, r, sum_out=r)
    assert s is r and np.allclose(r, want, rtol=1e-6)
    close(y, rms64(want, 1.0, 1e-6), 2e-5)
    with pytest.raises(sixfold.Error, match="argument 'residual': expected shape"):
        sixfold.add_rms_norm(x, r[:, :39])
    with pytest.raises(sixfold.Error, match="argument 'weight': expected shape \\[40\\]"):
        sixfold.add_layer_norm(x, r, np.ones(39, np.float32))


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (70, 1024), (3, 4097), (2, 30000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_norm_backward_matches_float64(shape, dtype):
    x = rng.normal(0.5, 2.0, shape).astype(dtype)
    dy = rng.normal(0.0, 1.0, shape).astype(dtype)
    w = rng.normal(1.0, 0.3, shape[-1]).astype(dtype)
    x64, d64, w64 = (a.astype(np.float64) for a in (x, dy, w))
    tol = 1e-4 if dtype == np.float32 else 2e-3
    for kind in ("rms", "layer"):
        want_dx, want_dw, want_db = norm_grads64(kind, x64, d64, w64, 1e-5)
        # the terms of dx cancel (n = 1 exactly): bound by their size, not the tiny result
        terms = np.abs(d64 * w64).max(-1, keepdims=True) / np.sqrt(
            ((x64 - (x64.mean(-1, keepdims=True) if kind == "layer" else 0)) ** 2).mean(-1, keepdims=True) + 1e-5)
        if kind == "rms":
            dx, dw = sixfold.rms_norm_backward(dy, x, w, eps=1e-5)
            db = None
        else:
            dx, dw, db = sixfold.layer_norm_backward(dy, x, w, eps=1e-5, dweight=np.empty(shape[-1], np.float32),
                                                     dbias=np.empty(shape[-1], np.float32))
        assert dx.dtype == dtype
        err = np.abs(dx.astype(np.float64) - want_dx)
        assert np.all(err <= tol * (np.abs(want_dx) + np.abs(want_dx).max(-1, keepdims=True) + 3 * terms)), err.max()
        close(dw, want_dw, tol)
        if db is not None:
            close(db, want_db, tol)


@pytest.mark.parametrize("n", [1, 17, 4097, 30000])
def test_softmax_backward_matches_float64(n):
    logits = rng.normal(0, 3, (6, n))
    y64 = np.exp(logits - logits.max(-1, keepdims=True))
    y64 /= y64.sum(-1, keepdims=True)
    y = y64.astype(np.float32)
    dy = rng.normal(0, 1, (6, n)).astype(np.float32)
    y64, d64 = y.astype(np.float64), dy.astype(np.float64)
    want = y64 * (d64 - (d64 * y64).sum(-1, keepdims=True))
    floor = 1e-5 * np.abs(d64).max()  # terms of size |dy| cancel (n = 1: exactly)
    close(sixfold.softmax_backward(dy, y), want, 1e-5, floor)
    ly = np.log(np.maximum(y64, 1e-300)).astype(np.float32)
    ly64 = ly.astype(np.float64)
    want = d64 - np.exp(ly64) * d64.sum(-1, keepdims=True)
    close(sixfold.log_softmax_backward(dy, ly), want, 1e-5, floor)
    dx = sixfold.softmax_backward(dy, y, dx=dy)  # in place over dy
    assert dx is dy


def test_norm_backward_weight_grads_are_deterministic_and_errors_name_the_argument():
    x = rng.normal(size=(3000, 256)).astype(np.float32)
    dy = rng.normal(size=(3000, 256)).astype(np.float32)
    w = rng.normal(1, 0.1, 256).astype(np.float32)
    a = sixfold.layer_norm_backward(dy, x, w)
    b = sixfold.layer_norm_backward(dy, x, w)
    for u, v in zip(a, b):
        assert np.array_equal(u.view(np.uint32), v.view(np.uint32))
    with pytest.raises(sixfold.Error, match="argument 'dweight': expected shape \\[256\\]"):
        sixfold.rms_norm_backward(dy, x, w, dweight=np.empty(255, np.float32))
    with pytest.raises(sixfold.Error, match="argument 'x': expected shape \\[3000, 256\\]"):
        sixfold.rms_norm_backward(dy, x[:, :255])


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (2, 3, 100), (3, 4097), (2, 30000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_saved_stats_round_trip(shape, dtype):
    """The forward's mean / rstd against float64, then the backward given them against float64
    and against the recompute path."""
    x = rng.normal(0.5, 2.0, shape).astype(dtype)
    dy = rng.normal(0.0, 1.0, shape).astype(dtype)
    w = rng.normal(1.0, 0.3, shape[-1]).astype(dtype)
    x64, d64, w64 = (a.astype(np.float64) for a in (x, dy, w))
    tol = 1e-4 if dtype == np.float32 else 2e-3
    mu = x64.mean(-1)
    y, mean, rstd = sixfold.layer_norm(x, w, stats=True)
    assert mean.dtype == np.float32 and mean.shape == shape[:-1] and rstd.shape == shape[:-1]
    want_r = 1 / np.sqrt(((x64 - mu[..., None]) ** 2).mean(-1) + 1e-5)
    assert np.all(np.abs(rstd - want_r) <= 2e-5 * want_r)
    assert np.all(np.abs(mean - mu) <= 2e-5 * (np.abs(mu) + 1 / want_r))
    y2, rr = sixfold.rms_norm(x, w, eps=1e-5, stats=True)
    want_rr = 1 / np.sqrt((x64 ** 2).mean(-1) + 1e-5)
    assert np.all(np.abs(rr - want_rr) <= 2e-5 * want_rr)
    for kind in ("rms", "layer"):
        want_dx, want_dw, want_db = norm_grads64(kind, x64, d64, w64, 1e-5)
        terms = np.abs(d64 * w64).max(-1, keepdims=True) / np.sqrt(
            ((x64 - (x64.mean(-1, keepdims=True) if kind == "layer" else 0)) ** 2).mean(-1, keepdims=True) + 1e-5)
        if kind == "rms":
            got = sixfold.rms_norm_backward(dy, x, w, eps=1e-5, rstd=rr)
            again = sixfold.rms_norm_backward(dy, x, w, eps=1e-5)
        else:
            got = sixfold.layer_norm_backward(dy, x, w, mean=mean, rstd=rstd)
            again = sixfold.layer_norm_backward(dy, x, w)
        err = np.abs(got[0].astype(np.float64) - want_dx)
        assert np.all(err <= tol * (np.abs(want_dx) + np.abs(want_dx).max(-1, keepdims=True) + 3 * terms)), err.max()
        close(got[1], want_dw, tol)
        if kind == "layer":
            close(got[2], want_db, tol)
        diff = np.abs(got[0].astype(np.float64) - again[0].astype(np.float64))
        assert np.all(diff <= tol * (np.abs(want_dx).max(-1, keepdims=True) + 3 * terms)), diff.max()
    # the residual-add forms save the statistics of s
    r = rng.normal(0.0, 1.0, shape).astype(dtype)
    _, s, m2, r2 = sixfold.add_layer_norm(x, r, w, stats=True)
    _, m3, r3 = sixfold.layer_norm(s, w, stats=True)
    assert np.array_equal(m2, m3) and np.array_equal(r2, r3)
    _, s, r4 = sixfold.add_rms_norm(x, r, w, stats=True)
    _, r5 = sixfold.rms_norm(s, w, stats=True)
    assert np.array_equal(r4, r5)


def test_saved_stats_errors_name_the_argument():
    x = rng.normal(size=(6, 40)).astype(np.float32)
    dy = rng.normal(size=(6, 40)).astype(np.float32)
    y, mean, rstd = sixfold.layer_norm(x, stats=True)
    with pytest.raises(sixfold.Error, match="argument 'rstd': expected given together with 'mean'"):
        sixfold.layer_norm_backward(dy, x, mean=mean)
    with pytest.raises(sixfold.Error, match="argument 'rstd': expected 6 elements"):
        sixfold.rms_norm_backward(dy, x, rstd=rstd[:5])
    with pytest.raises(sixfold.Error, match="argument 'mean': expected dtype f32, got f64"):
        sixfold.layer_norm(x, mean=np.empty(6, np.float64))
    out = np.empty_like(x)
    with pytest.raises(sixfold.Error, match="argument 'rstd': expected memory apart from 'out'"):
        sixfold.rms_norm(x, out=out, rstd=out.reshape(-1)[:6])


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and sixfold.cuda_available()):
        pytest.skip("no CUDA device usable by torch and sixfold")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(7, 3), (64, 4097), (1024, 1024), (3, 40000), (2, 1 << 20)])
def test_torch_backward_and_add_norm_against_autograd(shape):
    torch = _torch_cuda()
    import torch.nn.functional as F
    n = shape[-1]
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 2 + 0.5
    r = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(n, device="cuda") * 0.1 + 1).bfloat16()
    b = (torch.randn(n, device="cuda") * 0.1).bfloat16()

    def rel(got, ref):
        return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()

    # fused residual add: s exactly x + r rounded to bf16, y against float64 of the stored s
    y, s = sixfold.add_rms_norm(x, r, w, eps=1e-6)
    assert torch.equal(s, x + r)
    assert rel(y, F.rms_norm(s.double(), (n,), w.double(), 1e-6)) <= 4e-3
    y, s2 = sixfold.add_layer_norm(x, r, w, b, sum_out=r)  # residual updated in place
    assert s2 is r and torch.equal(r, s)
    assert rel(y, F.layer_norm(s.double(), (n,), w.double(), b.double(), 1e-5)) <= 4e-3

    # backward against autograd in float64; PyTorch's own bf16 backward as the yardstick
    for kind in ("rms", "layer", "softmax"):
        grads = {}
        for dt in (torch.float64, torch.bfloat16):
            # fresh leaves (x.to(x.dtype) would return x itself and mark it as requiring grad)
            xa = x.detach().to(dt).clone().requires_grad_()
            wa = w.detach().to(dt).clone().requires_grad_()
            ba = b.detach().to(dt).clone().requires_grad_()
            if kind == "rms":
                out = F.rms_norm(xa, (n,), wa, 1e-6)
            elif kind == "layer":
                out = F.layer_norm(xa, (n,), wa, ba, 1e-5)
            else:
                out = torch.softmax(xa, -1)
            out.backward(dy.to(dt))
            grads[dt] = (out.detach(), xa.grad, wa.grad, ba.grad)
        y64, dx64, dw64, db64 = grads[torch.float64]
        _, dxp, dwp, dbp = grads[torch.bfloat16]
        if kind == "rms":
            dx, dw = sixfold.rms_norm_backward(dy, x, w, eps=1e-6)
            pairs = [(dx, dx64, dxp), (dw, dw64, dwp)]
        elif kind == "layer":
            dx, dw, db = sixfold.layer_norm_backward(dy, x, w, eps=1e-5)
            pairs = [(dx, dx64, dxp), (dw, dw64, dwp), (db, db64, dbp)]
        else:
            yb = y64.bfloat16()  # the backward reads the stored forward output
            dx = sixfold.softmax_backward(dy, yb)
            want = yb.double() * (dy.double() - (dy.double() * yb.double()).sum(-1, keepdim=True))
            pairs = [(dx, want, dxp)]
        for got, ref64, peer in pairs:
            assert got.dtype == torch.bfloat16
            assert rel(got, ref64) <= max(2 * rel(peer, ref64), 8e-3), (kind, rel(got, ref64), rel(peer, ref64))
    # saved statistics: torch's native_layer_norm saves the same mean / rstd; the backward given
    # them matches the recompute path
    _, tmean, trstd = torch.native_layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    _, mean, rstd = sixfold.layer_norm(x, w, b, stats=True)
    assert mean.shape == x.shape[:-1] and mean.dtype == torch.float32
    assert rel(mean, tmean.reshape(mean.shape).double()) <= 1e-5
    assert rel(rstd, trstd.reshape(rstd.shape).double()) <= 1e-5
    saved = sixfold.layer_norm_backward(dy, x, w, mean=mean, rstd=rstd)
    recomputed = sixfold.layer_norm_backward(dy, x, w)
    for u, v in zip(saved, recomputed):
        assert rel(u, v.double()) <= 8e-3
    _, rr = sixfold.rms_norm(x, w, eps=1e-6, stats=True)
    dx_s, dw_s = sixfold.rms_norm_backward(dy, x, w, rstd=rr)
    dx_r, dw_r = sixfold.rms_norm_backward(dy, x, w, eps=1e-6)
    assert rel(dx_s, dx_r.double()) <= 8e-3 and rel(dw_s, dw_r.double()) <= 8e-3
    # same bits on a second call
    a = sixfold.layer_norm_backward(dy, x, w)
    c = sixfold.layer_norm_backward(dy, x, w)
    assert all(torch.equal(u, v) for u, v in zip(a, c))
