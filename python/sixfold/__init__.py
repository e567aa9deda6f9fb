"""sixfold: verified kernels licensed by algebra, on CPU and Hopper GPUs.

Every op takes arrays of any framework that speaks DLPack or the buffer protocol (torch, numpy,
cupy; jax for inputs) and uses them where they live, with no copies: host arrays run on all CPU
cores, CUDA arrays on the CUDA backend of their device. Outputs are allocated in the caller's
framework, or passed with ``out=`` (the result then aliases ``out``). An input the kernel cannot
take as it is (wrong dtype, non-contiguous where contiguity is required, mixed devices) raises
``sixfold.Error`` (a ValueError) carrying the C++ message; nothing is copied behind your back.

Streams: ``stream=`` takes a raw CUDA stream handle (int), a ``torch.cuda.Stream`` or a
``cupy.cuda.Stream``; by default the current stream of torch or cupy for their arrays is used.
Ops never synchronize the device, so they can be captured in CUDA graphs. The GIL is released
while kernels run.
"""
from __future__ import annotations

from . import _C

Error = _C.Error
cuda_available = _C.cuda_available

__all__ = ["Error", "cuda_available", "inclusive_scan", "exclusive_scan", "reduce",
           "segmented_reduce", "rms_norm", "layer_norm", "softmax", "log_softmax", "bias_gelu",
           "silu_gate", "check_laws"]

_OPS = ("sum", "max", "min")


def _framework(x) -> str:
    mod = type(x).__module__.split(".")[0]
    return {"numpy": "numpy", "torch": "torch", "cupy": "cupy", "jax": "jax", "jaxlib": "jax"}.get(mod, mod)


def _empty(x, shape):
    """An uninitialized array of x's framework, dtype and device."""
    fw = _framework(x)
    if fw == "numpy":
        import numpy as np
        return np.empty(shape, dtype=x.dtype)
    if fw == "torch":
        import torch
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if fw == "cupy":
        import cupy
        with x.device:
            return cupy.empty(shape, dtype=x.dtype)
    if fw == "jax":
        raise TypeError("sixfold: jax arrays are immutable, so sixfold cannot allocate a jax output; "
                        "pass out= as a numpy/cupy/torch array (jax inputs are read without copies)")
    raise TypeError(f"sixfold: cannot allocate an output like a {type(x).__name__}; pass out=")


def _stream(x, stream) -> int:
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    fw = _framework(x)
    if fw == "torch" and x.is_cuda:
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream
    if fw == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0


def _check_op(op):
    if op not in _OPS:
        raise Error(f"sixfold: argument 'op': expected one of {_OPS}, got {op!r}")


def inclusive_scan(x, *, op: str = "sum", out=None, stream=None):
    """out[i] = x[0] ∘ … ∘ x[i] for ∘ in {sum, max, min}; 1-D contiguous f32/f64/i32.

    ``out`` may be ``x`` (in place). f32 accumulates in f32; i32 sums wrap modulo 2^32;
    max/min propagate NaN.
    """
    _check_op(op)
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.inclusive_scan(x, out, op, _stream(x, stream))
    return out


def exclusive_scan(x, *, op: str = "sum", out=None, stream=None):
    """out[i] = e ∘ x[0] ∘ … ∘ x[i-1] (e: 0 for sum, -inf/+inf or the integer limits for max/min)."""
    _check_op(op)
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.exclusive_scan(x, out, op, _stream(x, stream))
    return out


def reduce(x, *, op: str = "sum", out=None, stream=None):
    """x[0] ∘ … ∘ x[n-1] as a 0-d array of x's framework (or written to a one-element ``out``)."""
    _check_op(op)
    if out is None:
        out = _empty(x, ())
    _C.reduce(x, out, op, _stream(x, stream))
    return out


def segmented_reduce(x, offsets, *, op: str = "sum", out=None, stream=None):
    """out[s] = reduce(x[offsets[s]:offsets[s+1]]); offsets i32/i64, non-decreasing, len(out)+1."""
    _check_op(op)
    if out is None:
        out = _empty(x, (max(int(offsets.shape[0]) - 1, 0),))
    _C.segmented_reduce(x, offsets, out, op, _stream(x, stream))
    return out


def rms_norm(x, weight=None, *, eps: float = 1e-6, out=None, stream=None):
    """y = x / sqrt(mean(x², last dim) + eps) · weight; f32/bf16/f16, f32 statistics, one pass."""
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.rms_norm(x, weight, out, float(eps), _stream(x, stream))
    return out


def layer_norm(x, weight=None, bias=None, *, eps: float = 1e-5, out=None, stream=None):
    """y = (x − mean) / sqrt(var + eps) · weight + bias over the last dim (biased variance)."""
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.layer_norm(x, weight, bias, out, float(eps), _stream(x, stream))
    return out


def softmax(x, *, out=None, stream=None):
    """Softmax over the last dimension, one read and one write; f32 arithmetic."""
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.softmax(x, out, _stream(x, stream))
    return out


def log_softmax(x, *, out=None, stream=None):
    """log-softmax over the last dimension, one read and one write; f32 arithmetic."""
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.log_softmax(x, out, _stream(x, stream))
    return out


def bias_gelu(x, bias=None, *, approximate: str = "none", out=None, stream=None):
    """y = gelu(x + bias): approximate="none" is the erf form, "tanh" the tanh form (as torch)."""
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.bias_gelu(x, bias, out, approximate, _stream(x, stream))
    return out


def silu_gate(a, b, *, out=None, stream=None):
    """y = silu(a) · b, SwiGLU's gate, in one pass over a and b."""
    if out is None:
        out = _empty(a, tuple(a.shape))
    _C.silu_gate(a, b, out, _stream(a, stream))
    return out


def check_laws(trials: int = 1000, counterexamples: bool = False):
    """Property-check the monoid laws of every monoid in the library: [(name, passed, report)]."""
    return _C.check_laws(trials, counterexamples)
