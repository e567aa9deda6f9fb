"""Autograd through sixfold.torch's norms: gradients of x, weight and bias against torch's own
float64 autograd of the same formula, on fresh random inputs (CPU, and CUDA where usable), through
both entry points — the custom ops (torch.ops.sixfold.*, what torch.compile traces) and the eager
fast path (sixfold.torch.rms_norm etc.: torch.autograd.Function) — and under torch.compile."""
import pytest

import sixfold

torch = pytest.importorskip("torch")
import sixfold.torch as st  # noqa: E402  registers torch.ops.sixfold.*

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and sixfold.cuda_available()),
                                reason="no CUDA device usable by torch and sixfold")

# (rows..., n): leading dims flattened by the ops; 1, primes, a non-multiple of every pack.
SHAPES = [(1, 1), (3, 5, 64), (7, 4097), (2, 3, 1000)]
DEVICES = ["cpu", pytest.param("cuda", marks=[gpu, needs_cuda])]
OPS = torch.ops.sixfold  # the custom ops
API = ["ops", "fast"]


def entry(api, name):
    """The op `name` through the custom op or the eager fast path (same signature)."""
    return getattr(OPS, name) if api == "ops" else getattr(st, name)


def tol(dtype):
    return {"rtol": 2e-4, "atol": 2e-4} if dtype == torch.float32 else {"rtol": 3e-2, "atol": 3e-2}


def leaf(shape, dtype, device, scale=1.0, shift=0.0):
    return ((torch.randn(shape, dtype=torch.float64) * scale + shift).to(device=device, dtype=dtype)
            .requires_grad_())


def reference_grads(fn, inputs, grads_out):
    """float64 autograd of fn over copies of `inputs` (None stays None), weighted by grads_out."""
    ref = [None if t is None else t.detach().double().requires_grad_() for t in inputs]
    outs = fn(*ref)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(outs, [g.double() for g in grads_out])
    return outs, [None if t is None else t.grad for t in ref]


def check(ours_fn, ref_fn, inputs, dtype):
    outs = ours_fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads_out = [torch.randn(o.shape, dtype=torch.float64).to(device=o.device, dtype=o.dtype) for o in outs]
    torch.autograd.backward(outs, grads_out)
    want_outs, want_grads = reference_grads(ref_fn, inputs, grads_out)
    for o, w in zip(outs, want_outs):
        torch.testing.assert_close(o.double(), w.detach(), **tol(dtype))
    for i, (t, w) in enumerate(zip(inputs, want_grads)):
        if t is None:
            continue
        assert t.grad is not None, f"input {i} got no gradient"
        # The gradient scale: dweight sums over rows, so compare relative to its magnitude.
        scale = max(1.0, float(w.abs().max()))
        torch.testing.assert_close(t.grad.double() / scale, w / scale, **tol(dtype), msg=f"grad of input {i}")


def ref_rms(x, w, eps):
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def ref_layer(x, w, b, eps):
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    if w is not None:
        y = y * w
    return y + b if b is not None else y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("api", API)
def test_rms_norm_grads(device, dtype, shape, weighted, api):
    torch.manual_seed(1)
    x = leaf(shape, dtype, device, scale=2.0, shift=0.5)
    w = leaf(shape[-1:], dtype, device, shift=1.0) if weighted else None
    f = entry(api, "rms_norm")
    check(lambda x, w: f(x, w, 1e-6), lambda x, w: ref_rms(x, w, 1e-6), [x, w], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", ["wb", "w", "b", "none"])
@pytest.mark.parametrize("api", API)
def test_layer_norm_grads(device, dtype, shape, affine, api):
    torch.manual_seed(2)
    x = leaf(shape, dtype, device, scale=3.0, shift=-1.0)
    w = leaf(shape[-1:], dtype, device, shift=1.0) if "w" in affine else None
    b = leaf(shape[-1:], dtype, device) if "b" in affine else None
    f = entry(api, "layer_norm")
    check(lambda x, w, b: f(x, w, b, 1e-5),
          lambda x, w, b: ref_layer(x, w, b, 1e-5), [x, w, b], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("api", API)
def test_softmax_grads(device, dtype, shape, log, api):
    torch.manual_seed(3)
    x = leaf(shape, dtype, device, scale=4.0)
    ours = entry(api, "log_softmax" if log else "softmax")
    ref = (lambda x: torch.log_softmax(x, -1)) if log else (lambda x: torch.softmax(x, -1))
    check(ours, ref, [x], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("api", API)
def test_fused_add_grads(device, dtype, kind, api):
    """(y, s) both used downstream: x and residual each get norm-backward(dy) + ds."""
    torch.manual_seed(4)
    shape = (3, 7, 300)
    x, r = leaf(shape, dtype, device), leaf(shape, dtype, device)
    w = leaf(shape[-1:], dtype, device, shift=1.0)
    if kind == "rms":
        check(lambda x, r, w: entry(api, "add_rms_norm")(x, r, w, 1e-6),
              lambda x, r, w: (ref_rms(x + r, w, 1e-6), x + r), [x, r, w], dtype)
    else:
        b = leaf(shape[-1:], dtype, device)
        check(lambda x, r, w, b: entry(api, "add_layer_norm")(x, r, w, b, 1e-5),
              lambda x, r, w, b: (ref_layer(x + r, w, b, 1e-5), x + r), [x, r, w, b], dtype)


@pytest.mark.parametrize("api", API)
def test_fused_add_only_the_norm_used(api):
    """Only y feeds the loss (ds is None in the backward): x and residual still get the norm's grad."""
    torch.manual_seed(5)
    x, r = leaf((4, 96), torch.float32, "cpu"), leaf((4, 96), torch.float32, "cpu")
    y, _ = entry(api, "add_rms_norm")(x, r, None, 1e-6)
    g = torch.randn_like(y)
    y.backward(g)
    xr = (x.detach() + r.detach()).double().requires_grad_()
    ref_rms(xr, None, 1e-6).backward(g.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(r.grad.double(), xr.grad, rtol=2e-4, atol=2e-4)


def test_saved_statistics_reach_the_backward():
    """The *_stats ops' statistics are what rms_norm / layer_norm save: the same values as
    sixfold's stats=True forward, and not differentiable."""
    x = leaf((6, 50), torch.float32, "cpu")
    y, rstd = torch.ops.sixfold.rms_norm_stats(x, None, 1e-6)
    want = torch.rsqrt((x.detach().double() ** 2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), want, rtol=1e-6, atol=0)
    assert not rstd.requires_grad and y.requires_grad
    y, mean, rstd = torch.ops.sixfold.layer_norm_stats(x, None, None, 1e-5)
    torch.testing.assert_close(mean.double(), x.detach().double().mean(-1), rtol=1e-6, atol=1e-6)
    assert not mean.requires_grad and not rstd.requires_grad


@pytest.mark.parametrize("api", API)
def test_weight_gradient_not_asked_for(api):
    """A frozen weight and bias (requires_grad False) get none; x still does, and matches."""
    x = leaf((5, 33), torch.float32, "cpu")
    w, b = torch.rand(33) + 0.5, torch.rand(33)
    entry(api, "rms_norm")(x, w, 1e-6).sum().backward()
    assert w.grad is None and x.grad is not None
    g = x.grad.clone()
    x.grad = None
    entry(api, "layer_norm")(x, w, b, 1e-5).pow(2).sum().backward()
    assert w.grad is None and b.grad is None and x.grad is not None
    x2 = x.detach().requires_grad_()
    entry("fast" if api == "ops" else "ops", "rms_norm")(x2, w, 1e-6).sum().backward()
    torch.testing.assert_close(x2.grad, g)


@pytest.mark.parametrize("device,backend", [("cpu", "aot_eager"),
                                            pytest.param("cuda", "aot_eager", marks=[gpu, needs_cuda]),
                                            pytest.param("cuda", "inductor", marks=[gpu, needs_cuda])])
def test_compiled_training_step_matches_eager(device, backend):
    """torch.compile(fullgraph=True) traces forward and backward through the custom ops."""
    torch.manual_seed(6)

    def step(x, r, w, b):  # the public functions: the fast path eagerly, the custom ops when compiled
        y, s = st.add_layer_norm(x, r, w, b, 1e-5)
        z = st.rms_norm(y * 2, w, 1e-6)
        act = OPS.silu_gate(y, s).mean() + OPS.bias_gelu(z, b, "tanh").mean()
        return (st.softmax(z) * s).sum() + st.log_softmax(s).mean() + act

    def grads(fn):
        x, r = leaf((6, 128), torch.float32, device), leaf((6, 128), torch.float32, device)
        w, b = leaf((128,), torch.float32, device, shift=1.0), leaf((128,), torch.float32, device)
        for t in (x, r, w, b):
            t.grad = None
        loss = fn(x, r, w, b)
        loss.backward()
        return loss.detach(), [t.grad for t in (x, r, w, b)]

    torch.manual_seed(7)
    want_loss, want = grads(step)
    torch.manual_seed(7)
    got_loss, got = grads(torch.compile(step, fullgraph=True, backend=backend))
    # inductor may fuse the torch ops around sixfold's differently: f32 rounding apart.
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-4)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 5, 64), (7, 4097)])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("biased", [True, False])
def test_bias_gelu_grads(device, dtype, shape, approximate, biased):
    torch.manual_seed(8)
    x = leaf(shape, dtype, device, scale=2.0)
    b = leaf(shape[-1:], dtype, device) if biased else None
    check(lambda x, b: OPS.bias_gelu(x, b, approximate),
          lambda x, b: torch.nn.functional.gelu(x + b if b is not None else x, approximate=approximate),
          [x, b], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 5, 64), (7, 4097)])
def test_silu_gate_grads(device, dtype, shape):
    torch.manual_seed(9)
    a, b = leaf(shape, dtype, device, scale=3.0), leaf(shape, dtype, device)
    check(lambda a, b: OPS.silu_gate(a, b), lambda a, b: torch.nn.functional.silu(a) * b, [a, b], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("api", API)
def test_any_layout(device, api):
    """Strided elements (a transposed view) and strided rows (a column slice) are taken as torch
    takes them: the same values and gradients as from contiguous copies."""
    torch.manual_seed(10)
    w = (torch.rand(12, device=device) + 0.5).requires_grad_()
    transposed = torch.randn(12, 64, device=device).t()     # (64, 12), element stride 64
    sliced = torch.randn(64, 40, device=device)[:, 5:17]    # (64, 12), row stride 40
    for base in (transposed, sliced):
        x = base.detach().requires_grad_()
        xc = base.detach().contiguous().requires_grad_()
        for name, args in (("rms_norm", (w, 1e-6)), ("layer_norm", (w, None, 1e-5)), ("softmax", ())):
            f = entry(api, name)
            y, yc = f(x, *args), f(xc, *args)
            torch.testing.assert_close(y, yc)
            g = torch.randn_like(yc).t().contiguous().t()   # a non-contiguous upstream gradient
            (gx,) = torch.autograd.grad(y, (x,), g)
            (gxc,) = torch.autograd.grad(yc, (xc,), g.contiguous())
            torch.testing.assert_close(gx, gxc)
