"""torch (CPU and CUDA), cupy and jax arrays through sixfold: zero-copy in and out, the current
stream honoured, CUDA-graph capture, torch.compile(fullgraph=True) through sixfold.torch, and
torch's own ops as a second, independent reference."""
import numpy as np
import pytest

import sixfold

torch = pytest.importorskip("torch")
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and sixfold.cuda_available()),
                                reason="no CUDA device usable by torch and sixfold")


def test_torch_cpu_zero_copy():
    x = torch.rand(4097, dtype=torch.float32) * 2 - 1
    out = torch.empty_like(x)
    y = sixfold.inclusive_scan(x, out=out)
    assert y is out
    assert sixfold._C.last_call_pointers() == (x.data_ptr(), out.data_ptr())
    torch.testing.assert_close(y.double(), torch.cumsum(x.double(), 0), atol=1e-4, rtol=1e-5)
    assert isinstance(sixfold.reduce(x), torch.Tensor)


def test_torch_bf16_and_strided_are_errors_not_copies():
    with pytest.raises(sixfold.Error, match="dtype f32, f64 or i32, got bf16"):
        sixfold.inclusive_scan(torch.ones(8, dtype=torch.bfloat16))
    with pytest.raises(sixfold.Error, match="contiguous"):
        sixfold.inclusive_scan(torch.ones(16)[::2])


@gpu
@needs_cuda
@pytest.mark.parametrize("n", [1, 17, 4097, 1_000_003, 25_000_001])
def test_torch_cuda_against_torch_and_float64(n):
    x = torch.rand(n, device="cuda", dtype=torch.float32) * 2 - 1
    y = sixfold.inclusive_scan(x)
    assert y.device == x.device and sixfold._C.last_call_pointers()[0] == x.data_ptr()
    ref64 = torch.cumsum(x.double(), 0)
    scale = torch.cumsum(x.double().abs(), 0).clamp_min(1.0)
    assert ((y.double() - ref64).abs() <= 2e-6 * scale + 1e-6).all()
    # torch's own f32 cumsum as a second reference: both within the same bound of float64
    assert ((torch.cumsum(x, 0).double() - ref64).abs() <= 1e-3 * scale).all()
    s = sixfold.reduce(x)
    assert abs(s.item() - ref64[-1].item()) <= 1e-5 * scale[-1].item()
    assert torch.equal(sixfold.inclusive_scan(x, op="max"), torch.cummax(x, 0).values)


@gpu
@needs_cuda
def test_torch_cuda_current_stream_and_no_sync():
    x = torch.rand(1 << 22, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = sixfold.inclusive_scan(x)  # queued on `side`, the current stream here
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, torch.cumsum(x, 0), atol=1e-2, rtol=1e-4)


@gpu
@needs_cuda
def test_cuda_graph_capture():
    x = torch.rand(1 << 20, device="cuda")
    out = torch.empty_like(x)
    sixfold.inclusive_scan(x, out=out)  # warm-up outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sixfold.inclusive_scan(x, out=out)
    x.copy_(torch.rand_like(x))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.cumsum(x, 0), atol=1e-2, rtol=1e-4)


@gpu
@needs_cuda
def test_torch_compile_fullgraph():
    import sixfold.torch  # noqa: F401  registers torch.ops.sixfold.*

    def f(x):
        return torch.ops.sixfold.inclusive_scan(torch.sin(x), "sum") * 2 + torch.ops.sixfold.reduce(x, "max")

    x = torch.rand(100_003, device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.cumsum(torch.sin(x), 0) * 2 + x.max(), atol=1e-2, rtol=1e-4)


@gpu
@needs_cuda
def test_mixed_devices_error():
    x = torch.rand(10, device="cuda")
    out = torch.empty(10)
    with pytest.raises(sixfold.Error, match="expected device cuda:0"):
        sixfold.inclusive_scan(x, out=out)


@gpu
@needs_cuda
def test_cupy_zero_copy():
    cupy = pytest.importorskip("cupy")
    x = cupy.random.uniform(-1, 1, 65537).astype(cupy.float32)
    out = cupy.empty_like(x)
    y = sixfold.inclusive_scan(x, out=out)
    assert y is out and sixfold._C.last_call_pointers() == (x.data.ptr, out.data.ptr)
    ref = np.cumsum(cupy.asnumpy(x).astype(np.float64))
    assert np.allclose(cupy.asnumpy(y), ref, atol=1e-3)
    assert isinstance(sixfold.inclusive_scan(x), cupy.ndarray)


def test_jax_input_zero_copy():
    jax = pytest.importorskip("jax")
    x = jax.numpy.arange(1000, dtype=jax.numpy.float32)
    dev = next(iter(x.devices()))
    out = np.empty(1000, np.float32) if dev.platform == "cpu" else torch.empty(1000, device="cuda")
    sixfold.inclusive_scan(x, out=out)
    assert sixfold._C.last_call_pointers()[0] == x.unsafe_buffer_pointer()
    with pytest.raises(TypeError, match="immutable"):
        sixfold.inclusive_scan(x)


@gpu
@needs_cuda
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (4, 4097), (1024, 1024), (3, 40000), (2, 1 << 20)])
def test_torch_norms_against_torch(shape):
    import torch.nn.functional as F
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 2 + 0.5
    w = (torch.randn(shape[-1], device="cuda") * 0.1 + 1).to(torch.bfloat16)
    b = (torch.randn(shape[-1], device="cuda") * 0.1).to(torch.bfloat16)
    xd, wd, bd = x.double(), w.double(), b.double()
    cases = [
        (sixfold.rms_norm(x, w, eps=1e-6), F.rms_norm(xd, (shape[-1],), wd, eps=1e-6), F.rms_norm(x, (shape[-1],), w, eps=1e-6)),
        (sixfold.layer_norm(x, w, b), F.layer_norm(xd, (shape[-1],), wd, bd, eps=1e-5), F.layer_norm(x, (shape[-1],), w, b, eps=1e-5)),
        (sixfold.softmax(x), torch.softmax(xd, -1), torch.softmax(x, -1)),
        (sixfold.log_softmax(x), torch.log_softmax(xd, -1), torch.log_softmax(x, -1)),
    ]
    for got, ref64, peer in cases:
        assert got.dtype == torch.bfloat16 and got.shape == x.shape
        den = ref64.norm().clamp_min(1e-30)  # log_softmax of one element is exactly 0
        ours = (got.double() - ref64).norm() / den
        theirs = (peer.double() - ref64).norm() / den
        # at most about twice the error of PyTorch's own bf16 kernel, and within bf16 bounds
        assert ours <= max(2 * theirs, 4e-3), (ours.item(), theirs.item())


@gpu
@needs_cuda
@pytest.mark.parametrize("shape", [(1, 1), (5, 4095), (4096, 4096), (65536, 8)])
def test_torch_activations_against_torch(shape):
    import torch.nn.functional as F
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 3
    g = torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 3
    b = (torch.randn(shape[-1], device="cuda") * 0.3).bfloat16()
    xd, gd, bd = x.double(), g.double(), b.double()
    cases = [
        (sixfold.bias_gelu(x, b), F.gelu(xd + bd), F.gelu(x + b)),
        (sixfold.bias_gelu(x, b, approximate="tanh"), F.gelu(xd + bd, approximate="tanh"), F.gelu(x + b, approximate="tanh")),
        (sixfold.silu_gate(x, g), F.silu(xd) * gd, F.silu(x) * g),
    ]
    for got, ref64, peer in cases:
        den = ref64.norm().clamp_min(1e-30)
        ours = (got.double() - ref64).norm() / den
        theirs = (peer.double() - ref64).norm() / den
        assert ours <= max(2 * theirs, 4e-3), (ours.item(), theirs.item())
