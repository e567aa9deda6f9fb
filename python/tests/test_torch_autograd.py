"""Autograd through sixfold.torch's norms: gradients of x, weight and bias against torch's own
float64 autograd of the same formula, on fresh random inputs (CPU, and CUDA where usable), eager
and under torch.compile (aot_eager: the traced forward + backward graph with sixfold's custom ops)."""
import pytest

import sixfold

torch = pytest.importorskip("torch")
import sixfold.torch  # noqa: E402,F401  registers torch.ops.sixfold.*

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and sixfold.cuda_available()),
                                reason="no CUDA device usable by torch and sixfold")

# (rows..., n): leading dims flattened by the ops; 1, primes, a non-multiple of every pack.
SHAPES = [(1, 1), (3, 5, 64), (7, 4097), (2, 3, 1000)]
DEVICES = ["cpu", pytest.param("cuda", marks=[gpu, needs_cuda])]


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
def test_rms_norm_grads(device, dtype, shape, weighted):
    torch.manual_seed(1)
    x = leaf(shape, dtype, device, scale=2.0, shift=0.5)
    w = leaf(shape[-1:], dtype, device, shift=1.0) if weighted else None
    check(lambda x, w: torch.ops.sixfold.rms_norm(x, w, 1e-6), lambda x, w: ref_rms(x, w, 1e-6), [x, w], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", ["wb", "w", "b", "none"])
def test_layer_norm_grads(device, dtype, shape, affine):
    torch.manual_seed(2)
    x = leaf(shape, dtype, device, scale=3.0, shift=-1.0)
    w = leaf(shape[-1:], dtype, device, shift=1.0) if "w" in affine else None
    b = leaf(shape[-1:], dtype, device) if "b" in affine else None
    check(lambda x, w, b: torch.ops.sixfold.layer_norm(x, w, b, 1e-5),
          lambda x, w, b: ref_layer(x, w, b, 1e-5), [x, w, b], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_grads(device, dtype, shape, log):
    torch.manual_seed(3)
    x = leaf(shape, dtype, device, scale=4.0)
    ours = torch.ops.sixfold.log_softmax if log else torch.ops.sixfold.softmax
    ref = (lambda x: torch.log_softmax(x, -1)) if log else (lambda x: torch.softmax(x, -1))
    check(ours, ref, [x], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_fused_add_grads(device, dtype, kind):
    """(y, s) both used downstream: x and residual each get norm-backward(dy) + ds."""
    torch.manual_seed(4)
    shape = (3, 7, 300)
    x, r = leaf(shape, dtype, device), leaf(shape, dtype, device)
    w = leaf(shape[-1:], dtype, device, shift=1.0)
    if kind == "rms":
        check(lambda x, r, w: torch.ops.sixfold.add_rms_norm(x, r, w, 1e-6),
              lambda x, r, w: (ref_rms(x + r, w, 1e-6), x + r), [x, r, w], dtype)
    else:
        b = leaf(shape[-1:], dtype, device)
        check(lambda x, r, w, b: torch.ops.sixfold.add_layer_norm(x, r, w, b, 1e-5),
              lambda x, r, w, b: (ref_layer(x + r, w, b, 1e-5), x + r), [x, r, w, b], dtype)


def test_fused_add_only_the_norm_used():
    """Only y feeds the loss (ds is None in the backward): x and residual still get the norm's grad."""
    torch.manual_seed(5)
    x, r = leaf((4, 96), torch.float32, "cpu"), leaf((4, 96), torch.float32, "cpu")
    y, _ = torch.ops.sixfold.add_rms_norm(x, r, None, 1e-6)
    g = torch.randn_like(y)
    y.backward(g)
    xr = (x.detach() + r.detach()).double().requires_grad_()
    ref_rms(xr, None, 1e-6).backward(g.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(r.grad.double(), xr.grad, rtol=2e-4, atol=2e-4)


def test_weight_gradient_not_asked_for():
    """A frozen weight (requires_grad False) gets none; x still does."""
    x = leaf((5, 33), torch.float32, "cpu")
    w = torch.rand(33) + 0.5
    torch.ops.sixfold.rms_norm(x, w, 1e-6).sum().backward()
    assert w.grad is None and x.grad is not None


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_step_matches_eager(device):
    """torch.compile(fullgraph=True) traces forward and backward through the custom ops."""
    torch.manual_seed(6)

    def step(x, r, w, b):
        y, s = torch.ops.sixfold.add_layer_norm(x, r, w, b, 1e-5)
        z = torch.ops.sixfold.rms_norm(y * 2, w, 1e-6)
        return (torch.ops.sixfold.softmax(z) * s).sum() + torch.ops.sixfold.log_softmax(s).mean()

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
    got_loss, got = grads(torch.compile(step, fullgraph=True, backend="aot_eager"))
    torch.testing.assert_close(got_loss, want_loss)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
