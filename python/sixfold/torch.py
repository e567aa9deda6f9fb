"""sixfold ops as torch.library custom ops, so torch.compile(fullgraph=True) graphs call them.

Each op has a fake (meta) implementation giving the output's shape, dtype and device without
running anything; the real implementation runs on torch's current CUDA stream (or the CPU).

The norms are differentiable: rms_norm, layer_norm, softmax, log_softmax, add_rms_norm and
add_layer_norm have autograd formulas that call sixfold's fused backward kernels (themselves
custom ops: rms_norm_backward, layer_norm_backward, softmax_backward, log_softmax_backward), so
training loops and torch.compile'd backward graphs run them. rms_norm, layer_norm and the fused
adds are composite ops over *_stats ops, which also return the f32 row statistics (rstd, and mean
for LayerNorm: a few bytes a row) for the backward to read instead of recomputing; softmax's
backward reads its output. dweight / dbias are summed over rows in a fixed order. bias_gelu and
silu_gate differentiate through torch's own gelu / silu backward (sixfold has no kernels for
those); the scans are forward-only: autograd through them raises torch's "no autograd kernel"
error.

    import sixfold.torch  # registers torch.ops.sixfold.*
    y = torch.ops.sixfold.inclusive_scan(x, "sum")
"""
from __future__ import annotations

import torch

from . import _C
from . import _torch_stream


def _stream(x: torch.Tensor) -> int:
    return _torch_stream(x) if x.is_cuda else 0


def _like(x: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor of x's shape, dtype and device (outputs)."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _u(t: torch.Tensor | None) -> torch.Tensor | None:
    """t with unit stride in its last dimension (a copy only where it has not): torch's ops take
    any layout, sixfold's kernels take strided rows but not strided elements (its array API
    raises instead of copying; these torch ops copy, as torch would)."""
    if t is None or t.is_contiguous() or t.stride(-1) == 1 or t.shape[-1] <= 1:
        return t
    return t.contiguous()


@torch.library.custom_op("sixfold::inclusive_scan", mutates_args=())
def inclusive_scan(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.inclusive_scan(x, out, op, _stream(x))
    return out


@inclusive_scan.register_fake
def _(x, op="sum"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::exclusive_scan", mutates_args=())
def exclusive_scan(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.exclusive_scan(x, out, op, _stream(x))
    return out


@exclusive_scan.register_fake
def _(x, op="sum"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sixfold::reduce", mutates_args=())
def reduce(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = x.new_empty(())
    _C.reduce(x, out, op, _stream(x))
    return out


@reduce.register_fake
def _(x, op="sum"):
    return x.new_empty(())


@torch.library.custom_op("sixfold::segmented_reduce", mutates_args=())
def segmented_reduce(x: torch.Tensor, offsets: torch.Tensor, op: str = "sum") -> torch.Tensor:
    out = x.new_empty((max(offsets.shape[0] - 1, 0),))
    _C.segmented_reduce(x, offsets, out, op, _stream(x))
    return out


@segmented_reduce.register_fake
def _(x, offsets, op="sum"):
    return x.new_empty((max(offsets.shape[0] - 1, 0),))


def _rowwise_op(name: str, kernel):
    """The custom op sixfold::name(x) -> y, y = kernel over x's rows (softmax, log_softmax)."""

    @torch.library.custom_op(f"sixfold::{name}", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        out = _like(x)
        kernel(_u(x), out, _stream(x))
        return out

    op.register_fake(lambda x: _like(x))
    return op


def _from_output_op(name: str, kernel):
    """The custom op sixfold::name(dy, y) -> dx, a backward from the forward's output y."""

    @torch.library.custom_op(f"sixfold::{name}", mutates_args=())
    def op(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        dx = _like(y)
        kernel(_u(dy), y, dx, _stream(y))
        return dx

    op.register_fake(lambda dy, y: _like(y))
    return op


softmax = _rowwise_op("softmax", _C.softmax)


@torch.library.custom_op("sixfold::bias_gelu", mutates_args=())
def bias_gelu(x: torch.Tensor, bias: torch.Tensor | None = None, approximate: str = "none") -> torch.Tensor:
    out = _like(x)
    _C.bias_gelu(_u(x), _u(bias), out, approximate, _stream(x))
    return out


@bias_gelu.register_fake
def _(x, bias=None, approximate="none"):
    return _like(x)


@torch.library.custom_op("sixfold::silu_gate", mutates_args=())
def silu_gate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = _like(a)
    _C.silu_gate(_u(a), _u(b), out, _stream(a))
    return out


@silu_gate.register_fake
def _(a, b):
    return _like(a)


# ---- Norms with autograd ----------------------------------------------------------------------
# Forward ops that also return the row statistics (custom ops with autograd), the public names as
# composite ops over them, and the backward kernels as custom ops. Custom ops cannot return None:
# an empty tensor stands for a gradient not asked for.

def _row_stat(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[:-1], dtype=torch.float32)


def _none_grad(like: torch.Tensor) -> torch.Tensor:
    return like.new_empty((0,))


@torch.library.custom_op("sixfold::rms_norm_stats", mutates_args=())
def rms_norm_stats(x: torch.Tensor, weight: torch.Tensor | None = None,
                   eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): y = rms_norm(x, weight), rstd = 1/sqrt(mean(x²) + eps) per row (f32)."""
    out, rstd = _like(x), _row_stat(x)
    _C.rms_norm(_u(x), _u(weight), out, eps, _stream(x), rstd)
    return out, rstd


@rms_norm_stats.register_fake
def _(x, weight=None, eps=1e-6):
    return _like(x), _row_stat(x)


@torch.library.custom_op("sixfold::layer_norm_stats", mutates_args=())
def layer_norm_stats(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                     eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): y = layer_norm(x, weight, bias), the row mean and 1/sqrt(var + eps) (f32)."""
    out, mean, rstd = _like(x), _row_stat(x), _row_stat(x)
    _C.layer_norm(_u(x), _u(weight), _u(bias), out, eps, _stream(x), mean, rstd)
    return out, mean, rstd


@layer_norm_stats.register_fake
def _(x, weight=None, bias=None, eps=1e-5):
    return _like(x), _row_stat(x), _row_stat(x)


@torch.library.custom_op("sixfold::add_rms_norm_stats", mutates_args=())
def add_rms_norm_stats(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                       eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, s, rstd): s = x + residual (rounded to x's dtype), y = rms_norm(s, weight), one pass."""
    out, sum_out, rstd = _like(x), _like(x), _row_stat(x)
    _C.add_rms_norm(_u(x), _u(residual), _u(weight), out, sum_out, eps, _stream(x), rstd)
    return out, sum_out, rstd


@add_rms_norm_stats.register_fake
def _(x, residual, weight=None, eps=1e-6):
    return _like(x), _like(x), _row_stat(x)


@torch.library.custom_op("sixfold::add_layer_norm_stats", mutates_args=())
def add_layer_norm_stats(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                         bias: torch.Tensor | None = None,
                         eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, s, mean, rstd): s = x + residual, y = layer_norm(s, weight, bias), one pass."""
    out, sum_out, mean, rstd = _like(x), _like(x), _row_stat(x), _row_stat(x)
    _C.add_layer_norm(_u(x), _u(residual), _u(weight), _u(bias), out, sum_out, eps, _stream(x), mean, rstd)
    return out, sum_out, mean, rstd


@add_layer_norm_stats.register_fake
def _(x, residual, weight=None, bias=None, eps=1e-5):
    return _like(x), _like(x), _row_stat(x), _row_stat(x)


def _grad_buffers(x: torch.Tensor, weight: torch.Tensor | None, bias: bool = False):
    """dx, dweight (where there is a weight) and dbias (where asked; the weight's dtype, else
    x's) for a norm backward; None where absent."""
    dweight = _like(weight) if weight is not None else None
    dbias = (weight if weight is not None else x).new_empty((x.shape[-1],)) if bias else None
    return _like(x), dweight, dbias


def _or_empty(g: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return g if g is not None else _none_grad(x)


@torch.library.custom_op("sixfold::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6,
                      rstd: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of rms_norm from dy; rstd (the forward's) is read, else recomputed."""
    dx, dweight, _ = _grad_buffers(x, weight)
    _C.rms_norm_backward(_u(dy), _u(x), _u(weight), dx, dweight, eps, _stream(x), rstd)
    return dx, _or_empty(dweight, x)


@rms_norm_backward.register_fake
def _(dy, x, weight=None, eps=1e-6, rstd=None):
    dx, dweight, _ = _grad_buffers(x, weight)
    return dx, _or_empty(dweight, x)


@torch.library.custom_op("sixfold::layer_norm_backward", mutates_args=())
def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None, bias: bool = True,
                        eps: float = 1e-5, mean: torch.Tensor | None = None,
                        rstd: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias) of layer_norm from dy; mean and rstd (the forward's) are read, else
    recomputed."""
    dx, dweight, dbias = _grad_buffers(x, weight, bias)
    _C.layer_norm_backward(_u(dy), _u(x), _u(weight), dx, dweight, dbias, eps, _stream(x), mean, rstd)
    return dx, _or_empty(dweight, x), _or_empty(dbias, x)


@layer_norm_backward.register_fake
def _(dy, x, weight=None, bias=True, eps=1e-5, mean=None, rstd=None):
    dx, dweight, dbias = _grad_buffers(x, weight, bias)
    return dx, _or_empty(dweight, x), _or_empty(dbias, x)


softmax_backward = _from_output_op("softmax_backward", _C.softmax_backward)
log_softmax = _rowwise_op("log_softmax", _C.log_softmax)
log_softmax_backward = _from_output_op("log_softmax_backward", _C.log_softmax_backward)


def _grad_or_none(ctx, i: int, g: torch.Tensor):
    """The gradient of input i where autograd asks for it (and the op had that input), else None."""
    needs = ctx.needs_input_grad  # may be shorter than the op's inputs where trailing ones are None
    return g if i < len(needs) and needs[i] and g.numel() else None


def _sum_grad(ds_norm, ds):
    """The gradient reaching s = x + residual: the norm's, plus whatever flows into the returned s."""
    return ds_norm if ds is None else ds_norm + ds


# Statistics outputs are not differentiable; the norm's input is saved (for the fused adds: s,
# whose gradient x and residual both receive: the norm's plus whatever flows into the returned s).
def _rms_setup(ctx, inputs, output):
    ctx.fused = len(output) == 3
    ctx.mark_non_differentiable(output[-1])
    ctx.save_for_backward(output[1] if ctx.fused else inputs[0], inputs[-2], output[-1])
    ctx.eps = inputs[-1]


def _layer_setup(ctx, inputs, output):
    ctx.fused = len(output) == 4
    ctx.mark_non_differentiable(output[-2], output[-1])
    ctx.save_for_backward(output[1] if ctx.fused else inputs[0], inputs[-3], output[-2], output[-1])
    ctx.eps, ctx.has_bias = inputs[-1], inputs[-2] is not None


def _rms_grad(ctx, dy, *rest):  # rest: (ds, drstd) fused, else (drstd,)
    x, weight, rstd = ctx.saved_tensors
    dx, dweight = torch.ops.sixfold.rms_norm_backward(dy, x, weight, ctx.eps, rstd)
    if not ctx.fused:
        return dx, _grad_or_none(ctx, 1, dweight), None
    g = _sum_grad(dx, rest[0])
    return g, g, _grad_or_none(ctx, 2, dweight), None


def _layer_grad(ctx, dy, *rest):  # rest: (ds, dmean, drstd) fused, else (dmean, drstd)
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = torch.ops.sixfold.layer_norm_backward(dy, x, weight, ctx.has_bias, ctx.eps, mean, rstd)
    if not ctx.fused:
        return dx, _grad_or_none(ctx, 1, dweight), _grad_or_none(ctx, 2, dbias), None
    g = _sum_grad(dx, rest[0])
    return g, g, _grad_or_none(ctx, 2, dweight), _grad_or_none(ctx, 3, dbias), None


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


def _grad_from_output(backward_op):
    def grad(ctx, dy):
        (y,) = ctx.saved_tensors
        return backward_op(dy, y)

    return grad


rms_norm_stats.register_autograd(_rms_grad, setup_context=_rms_setup)
add_rms_norm_stats.register_autograd(_rms_grad, setup_context=_rms_setup)
layer_norm_stats.register_autograd(_layer_grad, setup_context=_layer_setup)
add_layer_norm_stats.register_autograd(_layer_grad, setup_context=_layer_setup)
softmax.register_autograd(_grad_from_output(softmax_backward), setup_context=_save_output)
log_softmax.register_autograd(_grad_from_output(log_softmax_backward), setup_context=_save_output)

# The public norms: composite ops (they decompose into the *_stats ops, under autograd and
# torch.compile alike), returning what the forward-only ops always returned.
_lib = torch.library.Library("sixfold", "FRAGMENT")
_lib.define("rms_norm(Tensor x, Tensor? weight=None, float eps=1e-06) -> Tensor")
_lib.define("layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor")
_lib.define("add_rms_norm(Tensor x, Tensor residual, Tensor? weight=None, float eps=1e-06) -> (Tensor, Tensor)")
_lib.define("add_layer_norm(Tensor x, Tensor residual, Tensor? weight=None, Tensor? bias=None, "
            "float eps=1e-05) -> (Tensor, Tensor)")


def _rms_norm(x, weight=None, eps=1e-6):
    return torch.ops.sixfold.rms_norm_stats(x, weight, eps)[0]


def _layer_norm(x, weight=None, bias=None, eps=1e-5):
    return torch.ops.sixfold.layer_norm_stats(x, weight, bias, eps)[0]


def _add_rms_norm(x, residual, weight=None, eps=1e-6):
    y, s, _ = torch.ops.sixfold.add_rms_norm_stats(x, residual, weight, eps)
    return y, s


def _add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5):
    y, s, _, _ = torch.ops.sixfold.add_layer_norm_stats(x, residual, weight, bias, eps)
    return y, s


_lib.impl("rms_norm", _rms_norm, "CompositeImplicitAutograd")
_lib.impl("layer_norm", _layer_norm, "CompositeImplicitAutograd")
_lib.impl("add_rms_norm", _add_rms_norm, "CompositeImplicitAutograd")
_lib.impl("add_layer_norm", _add_layer_norm, "CompositeImplicitAutograd")


# Eager fast path: the same kernels through torch.autograd.Function and direct calls, without
# the custom-op dispatch (whose Python layers cost ~50 µs of host time per forward + backward on
# the dev box, against a 4096x4096 bf16 step's ~60 µs of GPU time). Under torch.compile the
# public functions below call the custom ops, which dynamo can trace.

def _grad_out(ctx, i: int, like: torch.Tensor | None) -> torch.Tensor | None:
    """An output for input i's gradient where autograd wants it (and the input exists), else None."""
    return _like(like) if like is not None and ctx.needs_input_grad[i] else None


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, residual=None):
        x, weight, residual = _u(x), _u(weight), _u(residual)
        out, rstd = _like(x), _row_stat(x)
        if residual is None:
            s = x
            _C.rms_norm(_u(x), _u(weight), out, eps, _stream(x), rstd)
        else:
            s = _like(x)
            _C.add_rms_norm(x, residual, weight, out, s, eps, _stream(x), rstd)
        ctx.save_for_backward(s, weight, rstd)
        ctx.eps, ctx.fused = eps, residual is not None
        return (out, s) if ctx.fused else out

    @staticmethod
    def backward(ctx, dy, ds=None):
        s, weight, rstd = ctx.saved_tensors
        dx, dweight = _like(s), _grad_out(ctx, 1, weight)
        _C.rms_norm_backward(_u(dy), s, weight, dx, dweight, ctx.eps, _stream(s), rstd)
        if not ctx.fused:
            return dx, dweight, None, None
        g = _sum_grad(dx, ds)
        return g, dweight, None, g


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, residual=None):
        x, weight, bias, residual = _u(x), _u(weight), _u(bias), _u(residual)
        out, mean, rstd = _like(x), _row_stat(x), _row_stat(x)
        if residual is None:
            s = x
            _C.layer_norm(_u(x), _u(weight), _u(bias), out, eps, _stream(x), mean, rstd)
        else:
            s = _like(x)
            _C.add_layer_norm(x, residual, weight, bias, out, s, eps, _stream(x), mean, rstd)
        ctx.save_for_backward(s, weight, mean, rstd)
        ctx.eps, ctx.fused, ctx.bias_dtype = eps, residual is not None, bias.dtype if bias is not None else None
        return (out, s) if ctx.fused else out

    @staticmethod
    def backward(ctx, dy, ds=None):
        s, weight, mean, rstd = ctx.saved_tensors
        dx, dweight = _like(s), _grad_out(ctx, 1, weight)
        dbias = s.new_empty((s.shape[-1],), dtype=ctx.bias_dtype) \
            if ctx.bias_dtype is not None and ctx.needs_input_grad[2] else None
        _C.layer_norm_backward(_u(dy), s, weight, dx, dweight, dbias, ctx.eps, _stream(s), mean, rstd)
        if not ctx.fused:
            return dx, dweight, dbias, None, None
        g = _sum_grad(dx, ds)
        return g, dweight, dbias, None, g


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, log):
        x = _u(x)
        out = _like(x)
        (_C.log_softmax if log else _C.softmax)(x, out, _stream(x))
        ctx.save_for_backward(out)
        ctx.log = log
        return out

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dx = _like(y)
        (_C.log_softmax_backward if ctx.log else _C.softmax_backward)(_u(dy), y, dx, _stream(y))
        return dx, None


_compiling = getattr(torch.compiler, "is_compiling", lambda: False)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """y = x / sqrt(mean(x², last dim) + eps) · weight (differentiable)."""
    if _compiling():
        return torch.ops.sixfold.rms_norm(x, weight, eps)
    return _RmsNorm.apply(x, weight, eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """y = (x − mean) / sqrt(var + eps) · weight + bias over the last dim (differentiable)."""
    if _compiling():
        return torch.ops.sixfold.layer_norm(x, weight, bias, eps)
    return _LayerNorm.apply(x, weight, bias, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                 eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s): s = x + residual (rounded to x's dtype), y = rms_norm(s, weight) (differentiable)."""
    if _compiling():
        return torch.ops.sixfold.add_rms_norm(x, residual, weight, eps)
    return _RmsNorm.apply(x, weight, eps, residual)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, s): s = x + residual (rounded to x's dtype), y = layer_norm(s, weight, bias) (differentiable)."""
    if _compiling():
        return torch.ops.sixfold.add_layer_norm(x, residual, weight, bias, eps)
    return _LayerNorm.apply(x, weight, bias, eps, residual)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension (differentiable)."""
    return torch.ops.sixfold.softmax(x) if _compiling() else _Softmax.apply(x, False)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """log-softmax over the last dimension (differentiable)."""
    return torch.ops.sixfold.log_softmax(x) if _compiling() else _Softmax.apply(x, True)


# ---- The activations' gradients, in torch ops ----------------------------------------------------
# sixfold has no backward kernels for bias_gelu and silu_gate; their gradients are torch's own
# gelu_backward / silu_backward on the f32 pre-activation, so training through them works eagerly
# and under torch.compile (one extra pass over the inputs, unfused).

def _bias_gelu_setup(ctx, inputs, output):
    x, bias, approximate = inputs
    ctx.save_for_backward(x, bias)
    ctx.approximate = approximate


def _bias_gelu_grad(ctx, dy):
    x, bias = ctx.saved_tensors
    z = x.float() if bias is None else x.float() + bias.float()
    dz = torch.ops.aten.gelu_backward(dy.float(), z, approximate=ctx.approximate)
    dx = dz.to(x.dtype) if ctx.needs_input_grad[0] else None
    dbias = None
    if bias is not None and len(ctx.needs_input_grad) > 1 and ctx.needs_input_grad[1]:
        dbias = dz.reshape(-1, dz.shape[-1]).sum(0).to(bias.dtype)
    return dx, dbias, None


def _silu_gate_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _silu_gate_grad(ctx, dy):
    a, b = ctx.saved_tensors
    af, g = a.float(), dy.float()
    da = torch.ops.aten.silu_backward(g * b.float(), af).to(a.dtype) if ctx.needs_input_grad[0] else None
    db = (g * torch.nn.functional.silu(af)).to(b.dtype) if ctx.needs_input_grad[1] else None
    return da, db


bias_gelu.register_autograd(_bias_gelu_grad, setup_context=_bias_gelu_setup)
silu_gate.register_autograd(_silu_gate_grad, setup_context=_silu_gate_setup)
