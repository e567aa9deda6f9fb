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
           "segmented_reduce", "rms_norm", "layer_norm", "softmax", "log_softmax", "add_rms_norm",
           "add_layer_norm", "rms_norm_backward", "layer_norm_backward", "softmax_backward",
           "log_softmax_backward", "bias_gelu",
           "silu_gate", "check_laws"]

_OPS = ("sum", "max", "min")


def _framework(x) -> str:
    mod = type(x).__module__.split(".")[0]
    return {"numpy": "numpy", "torch": "torch", "cupy": "cupy", "jax": "jax", "jaxlib": "jax"}.get(mod, mod)


def _empty(x, shape, dtype=None, arg="out"):
    """An uninitialized array of x's framework and device; x's dtype, or `dtype` by name
    ("int64", "float32"). `arg` names the keyword a caller can pass instead."""
    fw = _framework(x)
    if fw == "numpy":
        import numpy as np
        return np.empty(shape, dtype=x.dtype if dtype is None else getattr(np, dtype))
    if fw == "torch":
        import torch
        return torch.empty(shape, dtype=x.dtype if dtype is None else getattr(torch, dtype), device=x.device)
    if fw == "cupy":
        import cupy
        with x.device:
            return cupy.empty(shape, dtype=x.dtype if dtype is None else getattr(cupy, dtype))
    if fw == "jax":
        raise TypeError("sixfold: jax arrays are immutable, so sixfold cannot allocate a jax output; "
                        f"pass {arg}= as a numpy/cupy/torch array (jax inputs are read without copies)")
    raise TypeError(f"sixfold: cannot allocate an output like a {type(x).__name__}; pass {arg}=")


def _torch_stream(x) -> int:
    """The raw handle of torch's current CUDA stream on x's device. torch's own getter of the
    raw handle (the one Triton's launcher uses) costs a fraction of a microsecond;
    torch.cuda.current_stream() builds a Stream object first (several microseconds per call)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(x.get_device())
    return torch.cuda.current_stream(x.device).cuda_stream


def _stream(x, stream) -> int:
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    fw = _framework(x)
    if fw == "torch" and x.is_cuda:
        return _torch_stream(x)
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


def _stat(x, given, arg):
    """A saved-statistics output: `given`, or a new f32 array of x's leading shape."""
    return given if given is not None else _empty(x, tuple(x.shape[:-1]), "float32", arg=arg)


def rms_norm(x, weight=None, *, eps: float = 1e-6, out=None, stream=None, stats: bool = False,
             rstd=None):
    """y = x / sqrt(mean(x², last dim) + eps) · weight; f32/bf16/f16, f32 statistics, one pass.

    ``stats=True`` (or ``rstd=`` an f32 array of x's leading shape) also returns the row
    statistic the backward can take: (y, rstd), rstd = 1/sqrt(mean(x²) + eps).
    """
    if out is None:
        out = _empty(x, tuple(x.shape))
    if not (stats or rstd is not None):
        _C.rms_norm(x, weight, out, float(eps), _stream(x, stream))
        return out
    rstd = _stat(x, rstd, "rstd")
    _C.rms_norm(x, weight, out, float(eps), _stream(x, stream), rstd)
    return out, rstd


def layer_norm(x, weight=None, bias=None, *, eps: float = 1e-5, out=None, stream=None,
               stats: bool = False, mean=None, rstd=None):
    """y = (x − mean) / sqrt(var + eps) · weight + bias over the last dim (biased variance).

    ``stats=True`` (or ``mean=`` / ``rstd=`` f32 arrays of x's leading shape) also returns the
    row statistics, as torch's native_layer_norm does: (y, mean, rstd), rstd = 1/sqrt(var + eps).
    """
    if out is None:
        out = _empty(x, tuple(x.shape))
    if not (stats or mean is not None or rstd is not None):
        _C.layer_norm(x, weight, bias, out, float(eps), _stream(x, stream))
        return out
    mean, rstd = _stat(x, mean, "mean"), _stat(x, rstd, "rstd")
    _C.layer_norm(x, weight, bias, out, float(eps), _stream(x, stream), mean, rstd)
    return out, mean, rstd


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


def add_rms_norm(x, residual, weight=None, *, eps: float = 1e-6, out=None, sum_out=None, stream=None,
                 stats: bool = False):
    """s = x + residual (rounded to x's dtype); y = rms_norm(s). Returns (y, s) in one pass.

    ``sum_out=residual`` updates the residual stream in place (a pre-norm block's pattern).
    ``stats=True``: returns (y, s, rstd), the statistic of s (see rms_norm).
    """
    if out is None:
        out = _empty(x, tuple(x.shape))
    if sum_out is None:
        sum_out = _empty(x, tuple(x.shape))
    if not stats:
        _C.add_rms_norm(x, residual, weight, out, sum_out, float(eps), _stream(x, stream))
        return out, sum_out
    rstd = _stat(x, None, "rstd")
    _C.add_rms_norm(x, residual, weight, out, sum_out, float(eps), _stream(x, stream), rstd)
    return out, sum_out, rstd


def add_layer_norm(x, residual, weight=None, bias=None, *, eps: float = 1e-5, out=None, sum_out=None,
                   stream=None, stats: bool = False):
    """s = x + residual; y = layer_norm(s). Returns (y, s) in one pass (``sum_out=residual``: in place).

    ``stats=True``: returns (y, s, mean, rstd), the statistics of s (see layer_norm).
    """
    if out is None:
        out = _empty(x, tuple(x.shape))
    if sum_out is None:
        sum_out = _empty(x, tuple(x.shape))
    if not stats:
        _C.add_layer_norm(x, residual, weight, bias, out, sum_out, float(eps), _stream(x, stream))
        return out, sum_out
    mean, rstd = _stat(x, None, "mean"), _stat(x, None, "rstd")
    _C.add_layer_norm(x, residual, weight, bias, out, sum_out, float(eps), _stream(x, stream), mean, rstd)
    return out, sum_out, mean, rstd


def rms_norm_backward(dy, x, weight=None, *, eps: float = 1e-6, dx=None, dweight=None, stream=None,
                      rstd=None):
    """Gradients of rms_norm(x, weight) given dy: returns (dx, dweight); dweight is None without weight.

    One read of x and dy, one write of dx; dweight is summed over rows in a fixed order (the same
    bits on every call). ``dweight=`` may be f32 or the weight's dtype; ``dx=dy`` works in place.
    ``rstd=``: the forward's saved statistic (``rms_norm(..., stats=True)``): one reduction per
    row instead of recomputing it (eps is then unused).
    """
    if dx is None:
        dx = _empty(x, tuple(x.shape))
    if dweight is None and weight is not None:
        dweight = _empty(weight, tuple(weight.shape))
    _C.rms_norm_backward(dy, x, weight, dx, dweight, float(eps), _stream(x, stream), rstd)
    return dx, dweight


def layer_norm_backward(dy, x, weight=None, *, bias: bool = True, eps: float = 1e-5, dx=None,
                        dweight=None, dbias=None, stream=None, mean=None, rstd=None):
    """Gradients of layer_norm(x, weight, bias) given dy: returns (dx, dweight, dbias).

    dweight is None without weight, dbias None when ``bias=False``; both are deterministic.
    ``mean=``, ``rstd=`` (together): the forward's saved statistics (``layer_norm(...,
    stats=True)``), read instead of recomputed — one reduction per row (eps is then unused).
    """
    if dx is None:
        dx = _empty(x, tuple(x.shape))
    if dweight is None and weight is not None:
        dweight = _empty(weight, tuple(weight.shape))
    if dbias is None and bias:
        dbias = _empty(weight if weight is not None else x, (int(x.shape[-1]),))
    _C.layer_norm_backward(dy, x, weight, dx, dweight, dbias, float(eps), _stream(x, stream), mean, rstd)
    return dx, dweight, dbias


def softmax_backward(dy, y, *, dx=None, stream=None):
    """dx = y · (dy − Σ dy·y) over the last dimension, from the forward output y."""
    if dx is None:
        dx = _empty(y, tuple(y.shape))
    _C.softmax_backward(dy, y, dx, _stream(y, stream))
    return dx


def log_softmax_backward(dy, y, *, dx=None, stream=None):
    """dx = dy − exp(y) · Σ dy over the last dimension, from the forward output y = log_softmax(x)."""
    if dx is None:
        dx = _empty(y, tuple(y.shape))
    _C.log_softmax_backward(dy, y, dx, _stream(y, stream))
    return dx


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


def topk(x, k: int, *, largest: bool = True, sorted: bool = True, out=None, stream=None):
    """(values, indices) of the k largest (or smallest) along the last dimension, exact and
    deterministic: among equal values the lower index wins; NaN is above +inf (as torch.topk);
    -0.0 == +0.0. f32, f16, bf16, f64, i32; indices int64. out=(values, indices) optional."""
    k = int(k)
    if out is None:
        n = int(x.shape[-1]) if len(x.shape) else 0
        kept = k if 1 <= k <= n else 1  # an invalid k is reported by the C++ validation
        shape = tuple(x.shape[:-1]) + (kept,)
        out = (_empty(x, shape), _empty(x, shape, "int64", "out"))
    values, indices = out
    _C.topk(x, k, values, indices, bool(largest), bool(sorted), _stream(x, stream))
    return values, indices


class TopKStream:
    """The top-k state of a stream of host arrays, in O(k) memory: push(chunk[, first_index]),
    merge(other), result() -> (values, indices) best first (numpy). Exactly topk of the
    concatenation, whatever the chunking and merge order."""

    def __init__(self, k: int, dtype="float32", *, largest: bool = True):
        import numpy as np
        self._dtype = str(np.dtype(dtype)) if str(dtype) != "bfloat16" else "bfloat16"
        self._s = _C.TopKStream(self._dtype, int(k), bool(largest))

    def push(self, chunk, first_index=None):
        self._s.push(chunk, None if first_index is None else int(first_index))

    def merge(self, other: "TopKStream"):
        self._s.merge(other._s)

    def copy(self) -> "TopKStream":
        c = TopKStream.__new__(TopKStream)
        c._dtype, c._s = self._dtype, self._s.copy()
        return c

    k = property(lambda self: self._s.k)
    seen = property(lambda self: self._s.seen)

    def result(self):
        import numpy as np
        m = self._s.size
        values = np.empty(m, dtype=self._dtype)
        indices = np.empty(m, dtype=np.int64)
        self._s.result_into(values, indices)
        return values, indices


__all__ += ["topk", "TopKStream"]


def check_laws(trials: int = 1000, counterexamples: bool = False):
    """Property-check the monoid laws of every monoid in the library: [(name, passed, report)]."""
    return _C.check_laws(trials, counterexamples)


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                   return_last_state=False, *, initial_state=None, cu_seqlens=None, out=None,
                   final_state=None, stream=None):
    """Mamba's selective scan, the semantics of mamba-ssm's selective_scan_fn (real A).

    u, delta, z: (batch, d, L); A: (d, n) f32; B, C: (d, n) f32, (batch, n, L) (one group, as
    mamba-ssm accepts) or (batch, groups, n, L); D, delta_bias: (d) f32; initial_state:
    (batch, d, n) f32. With ``cu_seqlens`` (int32, nseq + 1) the sequences are packed: u, delta,
    z (d, total), B/C (groups, n, total), states (nseq, d, n), the state restarting at each
    boundary. Returns out (u's dtype), or (out, last_state) with ``return_last_state``
    (last_state f32). f32/bf16/f16 inputs, f32 state.
    """
    if cu_seqlens is None:  # (batch, n, L) -> (batch, 1, n, L): a view, no copy
        B = B[:, None] if B.ndim == 3 else B
        C = C[:, None] if C.ndim == 3 else C
    if out is None:
        out = _empty(u, tuple(u.shape))
    if return_last_state and final_state is None:
        nseq = int(cu_seqlens.shape[0]) - 1 if cu_seqlens is not None else int(u.shape[0])
        final_state = _empty(u, (nseq, int(A.shape[0]), int(A.shape[1])), "float32", "final_state")
    s = _stream(u, stream)
    if cu_seqlens is None:
        _C.selective_scan(u, delta, A, B, C, D, z, delta_bias, initial_state, out, final_state,
                          bool(delta_softplus), s)
    else:
        _C.selective_scan_varlen(u, delta, A, B, C, D, z, delta_bias, initial_state, cu_seqlens, out,
                                 final_state, bool(delta_softplus), s)
    return (out, final_state) if return_last_state else out


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           *, out=None, stream=None):
    """One decoding step of the selective scan; ``state`` (batch, d, n) f32 is updated in place.

    x, dt, z: (batch, d); B, C: (batch, n) or (batch, groups, n); returns out (batch, d).
    """
    if B.ndim == 2:
        B = B[:, None, :]
    if C.ndim == 2:
        C = C[:, None, :]
    if out is None:
        out = _empty(x, tuple(x.shape))
    _C.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, out, bool(dt_softplus),
                              _stream(x, stream))
    return out


__all__ += ["selective_scan", "selective_state_update"]


def _swap_seq_heads(x):
    """(b, l, h, d) <-> (b, h, l, d) as a view (no copy)."""
    return x.transpose(1, 2) if _framework(x) == "torch" else x.swapaxes(1, 2)


def _window(window):
    left, right = window
    return int(-1 if left is None else left), int(-1 if right is None else right)


def attention(q, k, v, *, causal: bool = False, scale=None, window=(None, None), layout: str = "bhld",
              return_lse: bool = False, out=None, lse=None, stream=None):
    """Exact softmax attention without the N×N score matrix (online softmax over key tiles).

    layout "bhld": q (batch, q_heads, q_len, d), k/v (batch, kv_heads, kv_len, d) — torch SDPA's
    order; "blhd": (batch, len, heads, d) — flash-attn's order; any strides with a unit last one.
    q_heads % kv_heads == 0 (GQA/MQA). ``scale`` defaults to 1/sqrt(d). ``causal`` is aligned to
    the bottom-right when q_len != kv_len; ``window=(left, right)`` limits key j of query i to
    i + kv_len − q_len − left <= j <= i + kv_len − q_len + right (None: unbounded). A row that
    sees no key gives zeros and lse −inf. Returns out (q's layout and dtype) or (out, lse) with
    ``return_lse``; lse is (batch, q_heads, q_len) f32, natural log. CPU: f32/bf16; CUDA: bf16/f16.
    """
    left, right = _window(window)
    if layout not in ("bhld", "blhd"):
        raise Error(f"sixfold.attention: argument 'layout': expected 'bhld' or 'blhd', got {layout!r}")
    if out is None:
        out = _empty(q, tuple(q.shape))
    if return_lse and lse is None and len(q.shape) == 4:
        b, h, lq = (q.shape[0], q.shape[2], q.shape[1]) if layout == "blhd" else tuple(q.shape[:3])
        lse = _empty(q, (int(b), int(h), int(lq)), "float32", "lse")
    args = (q, k, v, out) if layout == "bhld" else tuple(_swap_seq_heads(t) for t in (q, k, v, out))
    _C.attention(*args, lse, float(scale or 0.0), bool(causal), left, right, _stream(q, stream))
    return (out, lse) if return_lse else out


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, scale=None,
                     window=(None, None), return_lse: bool = False, out=None, lse=None, stream=None):
    """attention over sequences packed without padding: q (total_q, q_heads, d), k/v (total_k,
    kv_heads, d), cu_seqlens_q/_k int32 (batch + 1) cumulative offsets from 0; each sequence
    attends on its own (causal/window aligned per sequence). lse: (q_heads, total_q) f32."""
    left, right = _window(window)
    if out is None:
        out = _empty(q, tuple(q.shape))
    if return_lse and lse is None and len(q.shape) == 3:
        lse = _empty(q, (int(q.shape[1]), int(q.shape[0])), "float32", "lse")
    _C.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, float(scale or 0.0), bool(causal),
                        left, right, _stream(q, stream))
    return (out, lse) if return_lse else out


def merge_attention_states(o1, lse1, o2, lse2, *, out=None, lse_out=None, stream=None):
    """(o1, lse1) ⊕ (o2, lse2): two attentions over disjoint key sets → the attention over their
    union (the online-softmax monoid). o (..., d) f32/bf16/f16, lse (...) f32; ``out`` may be o1
    or o2 and ``lse_out`` lse1 or lse2 (in place). A side with lse −inf contributes nothing.
    Returns (out, lse_out)."""
    if out is None:
        out = _empty(o1, tuple(o1.shape))
    if lse_out is None:
        lse_out = _empty(lse1, tuple(lse1.shape), "float32", "lse_out")
    _C.merge_attention_states(o1, lse1, o2, lse2, out, lse_out, _stream(o1, stream))
    return out, lse_out


__all__ += ["attention", "attention_varlen", "merge_attention_states"]
